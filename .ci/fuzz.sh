#!/usr/bin/env bash
# Fuzz targets (tests/fuzz/fuzz_*.py) for FUZZ_SECONDS each (default 60): the GGUF reader against a reference
# parser, the tokenizer round trip / streaming decode, chat templates under the rendering budgets, hyperparameter validation
# and the grammar front end (limits + compile sandbox: a worker death or an over-budget compile is a finding), and
# loading damaged saved states (Context.load_state).
# atheris (libFuzzer for Python; a manylinux wheel exists for CPython 3.11/3.12 x86_64) goes into a throwaway venv
# that also sees the packages of $PYTHON (default python3), where fastgguf must be importable (installed, or built
# in place in this tree). Where atheris cannot be installed, the targets run as a seeded random-mutation loop
# (tests/fuzz/_harness.py). Prints each target's execution count; any finding fails (exit 1), and the crashing
# input is kept under $FUZZ_ARTIFACTS (default: a temporary directory, printed).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
SECONDS_EACH=${FUZZ_SECONDS:-60}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ART=${FUZZ_ARTIFACTS:-$TMP/artifacts}
mkdir -p "$ART"

"$PY" -m venv "$TMP/venv"
FUZZPY="$TMP/venv/bin/python"
# the new venv also sees $PYTHON's packages (fastgguf, numpy, jinja2)
"$PY" -c 'import site, sysconfig; print("\n".join(dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]] + site.getsitepackages())))' \
    > "$("$FUZZPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/parent-env.pth"
if "$FUZZPY" -m pip install -q --disable-pip-version-check --only-binary=:all: atheris; then
    echo "fuzz: atheris $("$FUZZPY" -c 'import importlib.metadata as m; print(m.version("atheris"))')"
else
    echo "fuzz: no atheris wheel for this Python: running the targets as a seeded random-mutation loop"
    export FUZZ_NO_ATHERIS=1
fi

fail=0
for target in gguf tokenizer chat_template hparams grammar state; do
    corpus="$TMP/corpus-$target"          # libFuzzer adds new inputs to the first directory: not the seeds
    mkdir -p "$corpus"
    log="$TMP/$target.log"
    set +e
    (cd "$ART" && "$FUZZPY" "$ROOT/tests/fuzz/fuzz_$target.py" -max_total_time="$SECONDS_EACH" -timeout=20 \
        -rss_limit_mb=3072 -artifact_prefix="$ART/$target-" "$corpus" "$ROOT/tests/fuzz/corpus/$target") \
        >"$log" 2>&1
    rc=$?
    set -e
    runs=$(grep -Eo 'Done [0-9]+ runs' "$log" | tail -1 | grep -Eo '[0-9]+' || true)
    if [ "$rc" -ne 0 ]; then
        echo "fuzz $target: FINDING (exit $rc) after ${runs:-?} runs; inputs kept in $ART"
        tail -40 "$log"
        fail=1
        FUZZ_ARTIFACTS=$ART  # keep them
        trap - EXIT
    else
        echo "fuzz $target: ${runs:-?} executions in ${SECONDS_EACH} s, no findings"
    fi
done
exit "$fail"
