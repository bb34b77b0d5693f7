#!/usr/bin/env bash
# Show that each guard of the docs suite catches its fault.
#
# For each fault: clone the committed HEAD into a scratch folder, inject the fault, run the tests that
# guard against it, and print their verdict (each run must FAIL). Needs the project's .venv
# (`make install`); the browser cases need Chromium (`make browser`). Takes a few minutes.
#   usage: scripts/demo_guards.sh [fault ...]     (default: all)
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
PY="$repo/.venv/bin/python"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fence='```'

declare -A setup tests
setup[failing-block]="printf '\n${fence}python\nassert 1 + 1 == 3\n${fence}\n' | tee -a docs/it/index.md >> docs/en/index.md"
tests[failing-block]="tests/test_docs.py"
setup[skipped-fence]="sed -i '0,/^${fence}python\$/s//${fence}py/' docs/it/setup.md"
tests[skipped-fence]="tests/test_docs.py"
setup[stale-output]="sed -i 's/\[0.659 0.242 0.099\]/[0.66 0.24 0.10]/' docs/it/index.md docs/en/index.md"
tests[stale-output]="tests/test_docs.py"
setup[code-differs]="sed -i 's/scores = np.array(\[2.0, 1.0, 0.1\])/scores = np.array([2.0, 1.0, 0.2])/' docs/en/index.md"
tests[code-differs]="tests/test_parity.py"
setup[page-missing]="git rm -q docs/en/setup.md"
tests[page-missing]="tests/test_parity.py"
setup[solution-outside]="sed -i '/^??? success/,\$ s/^    //' docs/it/feed-forward.md docs/en/feed-forward.md"
tests[solution-outside]="tests/test_guards.py::test_every_solution_holds_a_block_that_runs"
setup[notebook-json]="sed -i '/hooks\/notebooks_i18n.py/d' mkdocs.yml"
tests[notebook-json]="tests/test_site_build.py tests/test_browser.py -k notebook"
setup[mathjax-removed]="sed -i '/assets\/mathjax\/tex-chtml.js/d' mkdocs.yml"
tests[mathjax-removed]="tests/test_browser.py -k index.md"
setup[outside-request]="printf '\n<img src=\"https://example.org/pixel.png\" alt=\"\">\n' | tee -a docs/it/setup.md >> docs/en/setup.md"
tests[outside-request]="tests/test_site_build.py::test_no_page_loads_anything_from_the_network tests/test_browser.py::test_page_in_the_browser[it/setup.md]"

faults=("$@")
[ ${#faults[@]} -gt 0 ] || faults=(failing-block skipped-fence stale-output code-differs page-missing
                                  solution-outside notebook-json mathjax-removed outside-request)
status=0
for f in "${faults[@]}"; do
  d="$tmp/$f"
  git clone -q "$repo" "$d"
  (cd "$d" && bash -c "${setup[$f]}")
  echo "=== $f: ${setup[$f]}"
  # shellcheck disable=SC2086
  out=$(cd "$d" && "$PY" -m pytest -q -p no:cacheprovider ${tests[$f]} 2>&1)
  echo "$out" | grep -E "^(FAILED|ERROR)|AssertionError:|^[0-9]+ (passed|failed)|(passed|failed).* in " | head -6
  if echo "$out" | grep -qE "[0-9]+ failed|[0-9]+ error"; then echo "--> caught"; else echo "--> NOT CAUGHT"; status=1; fi
done
exit $status
