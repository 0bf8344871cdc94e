#!/usr/bin/env bash
# PII detection benchmark: Hearth vs Presidio on a seeded Faker corpus, one run.
#
#   bench/privacy/run.sh [SEED] [DOCS_PER_LOCALE_AND_GENRE]
#
# Needs: the name lists (privacy/fetch-data.sh) and the Python venv .venv-privacy with
# the pinned packages (see docs/privacy.md). Writes the corpus under .hearth/privacy-bench/
# (git-ignored, reproducible from the seed) and the report to
# bench/results/privacy-<date>-seed<SEED>.md.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
seed="${1:-2026}"
docs="${2:-40}"
py="${PRIVACY_PYTHON:-$repo/.venv-privacy/bin/python}"
target="${CARGO_TARGET_DIR:-$repo/target}"
out="$repo/.hearth/privacy-bench"
mkdir -p "$out" bench/results

privacy/fetch-data.sh
"$py" bench/privacy/gen_corpus.py --seed "$seed" --docs "$docs" --out "$out/corpus-seed$seed.jsonl"
cargo build --release -p hearth-privacy --example privacy_predict -j "${CARGO_JOBS:-1}"
report="bench/results/privacy-$(date +%F)-seed$seed.md"
"$py" bench/privacy/evaluate.py \
  --corpus "$out/corpus-seed$seed.jsonl" \
  --hearth-bin "$target/release/examples/privacy_predict" \
  --report "$report" \
  --command "bench/privacy/run.sh $seed $docs" \
  ${PRIVACY_ERRORS:+--errors "$PRIVACY_ERRORS"}
echo "report: $report"
