#!/usr/bin/env bash
# The whole test suite: what the README names and what CI runs.
# Unit tests, the conformance scenarios, integration and trybuild UI tests.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test --workspace "$@"
