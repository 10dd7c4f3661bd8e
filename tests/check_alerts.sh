#!/bin/sh
# Checks docs/alerts.yml with promtool: syntax (check rules) and behaviour
# (test rules docs/alerts.test.yml). Exits 77 (ctest: skipped) only when
# promtool is not installed (scripts/install-deps.sh installs prometheus).
# usage: check_alerts.sh SOURCE_DIR
set -eu
docs="${1:?usage: check_alerts.sh SOURCE_DIR}/docs"
if ! command -v promtool >/dev/null 2>&1; then
    echo "check_alerts: promtool not found (install prometheus); skipping" >&2
    exit 77
fi
promtool check rules "$docs/alerts.yml"
# test rules resolves rule_files relative to the test file's directory.
cd "$docs"
promtool test rules alerts.test.yml
