#!/usr/bin/env bash
# docs/explore.md and docs/images/explore/: examples/explore.ipynb executed (its own demo set, the CPU or
# the GPU there is) and rendered to markdown with its plots, what a reader browsing the repository sees.
# Rerun after editing the notebook: tests/test_notebook.py fails while the rendered code cells differ.
#   bash tools/render_notebook.sh
# Needs jupyter nbconvert, ipykernel and ipywidgets beside robocache[lerobot,viz].
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp examples/explore.ipynb "$work/"
# in a scratch folder: the demo set the notebook writes stays out of the checkout; DATASET unset: the demo
# set, whatever the caller's shell points at
(cd "$work" && env -u DATASET python -m jupyter nbconvert --to markdown --execute explore.ipynb \
    --ExecutePreprocessor.timeout=600 --NbConvertApp.output_files_dir=images/explore --output explore)
rm -rf docs/images/explore
mkdir -p docs/images
mv "$work/images/explore" docs/images/explore
{
    echo "<!-- Rendered from examples/explore.ipynb by tools/render_notebook.sh: edit the notebook, then rerun. -->"
    echo "> This is [examples/explore.ipynb](../examples/explore.ipynb) run top to bottom on its own demo set,"
    echo "> rendered by \`tools/render_notebook.sh\`."
    echo
    cat "$work/explore.md"
} > docs/explore.md
du -ch docs/explore.md docs/images/explore/* | tail -1
