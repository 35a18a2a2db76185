#!/usr/bin/env bash
# The interpreter `make` builds the venv with (printed on stdout). A distribution's own build (/usr/bin/python3 on
# Debian and Ubuntu: profile-guided, link-time optimised, libpython linked in) runs the twin 10-15 % faster than an
# interpreter built from source without those options, as pyenv builds by default (docs/decisions.md, D18),
# so it is taken when it is 3.11 or newer and can make a venv; else `python3` from PATH.
# `make PYTHON=…` overrides this choice.
set -u
for candidate in /usr/bin/python3 python3; do
    if command -v "$candidate" >/dev/null 2>&1 \
            && "$candidate" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
        command -v "$candidate"
        exit 0
    fi
done
echo python3
