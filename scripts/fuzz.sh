#!/usr/bin/env bash
# Placeholder replaced below once the fuzz harness exists.
exit 0
