#!/usr/bin/env bash
# The API check: compares the exported API of the public packages with the baseline checked in at
# api/timeoutmill.x, using golang.org/x/exp/cmd/apidiff at a pinned version (fetched through the
# module proxy, nothing else needed).
#
#   scripts/apicheck.sh            (make api-check)     compare; fail on an incompatible change that
#                                                       CHANGELOG.md's [Unreleased] does not name
#   scripts/apicheck.sh baseline   (make api-baseline)  run the check, then record the tree's API as
#                                                       the new baseline (FORCE=1 skips the check)
#   VERBOSE=1 scripts/apicheck.sh                       also list the compatible changes, and the
#                                                       features added and gone against api/timeoutmill.txt
#
# The rule: every incompatible change apidiff reports must be named, as `pkg.Name` (the package's
# name as code writes it, then the name apidiff reports, a method's receiver without `(*...)`:
# `timeouts.Manager.CancelByOwner`, `recoverability.Config.Endpoint`), in a top-level list entry
# of the [Unreleased] section that carries **Breaking** (or **Breaking:**). A removed package is named by its path in
# the module, in backticks (`persistence/storetest`). Naming a longer name also covers a shorter
# one (`recoverability.Config.Endpoint` covers a change reported on `recoverability.Config`), never
# the other way round. A method or field that a public type gets by embedding an internal type is
# reported on the internal type and shown as `*.Store.Stats`: name it on any public type that has
# it (`postgres.Store.Stats`). Internal packages, commands, examples and the acceptance suite are
# outside the promise and ignored. See docs/releasing.md.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
APIDIFF=golang.org/x/exp/cmd/apidiff@v0.0.0-20261113113407-e3970619a1a4
BASELINE=api/timeoutmill.x
# The same API as a readable list, one feature a line: what a review reads (go run ./api/internal/apilist).
LISTING=api/timeoutmill.txt
CHANGELOG=${APICHECK_CHANGELOG:-CHANGELOG.md}
# APICHECK_REPORT, for the rule's own tests (api/internal/apilist/apicheck_test.go): a file of
# apidiff's output to judge instead of running apidiff.
REPORT=${APICHECK_REPORT:-}
# Module-relative package paths outside the promise (internal/ is dropped by apidiff itself).
EXCLUDED='^(cmd|examples|acceptance)(/|$)'

mode=${1:-check}
module=$($GO list -m)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# breaking_entries prints each top-level list entry of [Unreleased] that carries **Breaking** (or
# **Breaking:**), one entry per line (an entry runs from its "- " at column 0 to the next one or the next heading).
breaking_entries() {
  awk '
    /^## / { flush(); inrel = ($0 ~ /^## \[Unreleased\]/); next }
    !inrel { next }
    /^#/ { flush(); next }
    /^[-*] / { flush(); entry = $0; next }
    { if (entry != "") entry = entry " " $0 }
    END { flush() }
    function flush() { if (entry ~ /\*\*Breaking:?\*\*/) print entry; entry = "" }
  ' "$CHANGELOG"
}

check() {
  if [[ ! -f $CHANGELOG ]]; then
    echo "apicheck: no $CHANGELOG" >&2
    return 1
  fi
  if [[ -n $REPORT ]]; then
    cp "$REPORT" "$tmp/report"
    : >"$tmp/stderr"
  elif [[ ! -f $BASELINE ]]; then
    echo "apicheck: no baseline at $BASELINE; write one with make api-baseline" >&2
    return 1
  # Read the baseline, load the tree as it is. A load error (the tree does not build) fails here.
  elif ! $GO run "$APIDIFF" -m "$BASELINE" "$module" >"$tmp/report" 2>"$tmp/stderr"; then
    grep -v '^Ignoring internal package' "$tmp/stderr" >&2 || true
    echo "apicheck: apidiff failed" >&2
    return 1
  fi
  if grep -v '^Ignoring internal package' "$tmp/stderr" >&2; then
    echo "apicheck: apidiff wrote the lines above to stderr" >&2
    return 1
  fi
  breaking_entries >"$tmp/breaking"

  local section="" line rel name ident pkg missing=0 named=0 compatible=0
  while IFS= read -r line; do
    case $line in
      "Incompatible changes:") section=incompatible; continue ;;
      "Compatible changes:") section=compatible; continue ;;
      "") continue ;;
    esac
    if [[ $section == "" || $line != "- "* ]]; then
      echo "apicheck: cannot read apidiff's line: $line" >&2
      return 1
    fi
    line=${line#- }
    if [[ $line =~ ^package\ ([^:]+):\ (removed|added)$ ]]; then
      rel=${BASH_REMATCH[1]#"$module"}
      rel=${rel#/}
      ident='`'$rel'`'
    elif [[ $line =~ ^\./([A-Za-z0-9_/-]+)\.([^:]+):\ (.*)$ ]]; then
      # "./persistence.Inspector.Stats: changed from ..." or "./timeouts.(*Manager).Cancel: ...":
      # package paths here have no dots, so the first dot ends the path.
      rel=${BASH_REMATCH[1]}
      name=${BASH_REMATCH[2]}
      name=${name//(\*/}
      name=${name//)/}
      pkg=${rel##*/}
      ident=$pkg.$name
      if [[ $rel =~ (^|/)internal(/|$) ]]; then
        # A method or field of an internal type, reported because a public type embeds it (the
        # SQL stores embed internal/sqlstore's): name it on the public type, any package's.
        ident="*.$name"
      fi
    else
      # Anything else (a change reported on another module's type, a new message form) cannot be
      # named by the rule: fail rather than pass it by.
      echo "apicheck: cannot read apidiff's line: $line" >&2
      return 1
    fi
    if [[ $rel =~ $EXCLUDED ]]; then
      continue
    fi
    if [[ $section == compatible ]]; then
      compatible=$((compatible + 1))
      [[ ${VERBOSE:-0} == 1 ]] && echo "  compatible: $line"
      continue
    fi
    # Named: the identifier, not inside a longer name on its left or right.
    local re
    re=$(sed 's/[]*^$.[]/\\&/g' <<<"$ident")
    re=${re/#\\\*/[A-Za-z0-9_]+}
    if grep -Eq "(^|[^A-Za-z0-9_])${re}([^A-Za-z0-9_]|\$)" "$tmp/breaking"; then
      named=$((named + 1))
      echo "  incompatible, named in [Unreleased]: $ident ($line)"
    else
      missing=$((missing + 1))
      echo "  INCOMPATIBLE, NOT NAMED: $ident ($line)"
    fi
  done <"$tmp/report"

  if [[ ${VERBOSE:-0} == 1 && -f $LISTING ]]; then
    echo "apicheck: the exported features, $LISTING against the tree (- gone, + new):"
    $GO run ./api/internal/apilist | diff "$LISTING" - | grep '^[<>]' | sed 's/^</  -/; s/^>/  +/' || true
  fi
  echo "apicheck: against $BASELINE: $compatible compatible change(s), $named incompatible named in $CHANGELOG, $missing incompatible not named"
  if ((missing > 0)); then
    cat >&2 <<EOF
apicheck: FAIL. An incompatible change to the public API needs a top-level entry under
'## [Unreleased]' in $CHANGELOG that carries **Breaking**, names each identifier above as shown
(e.g. \`wire.FormatExpire\`) and says how to migrate. Or keep the old API. See docs/releasing.md.
EOF
    return 1
  fi
}

baseline() {
  if [[ ${FORCE:-0} != 1 ]]; then
    check || {
      echo "apicheck: baseline not rewritten: name the incompatible changes first (FORCE=1 overrides)" >&2
      return 1
    }
  fi
  $GO run "$APIDIFF" -m -w "$tmp/new.x" "$module" 2>"$tmp/stderr" || {
    grep -v '^Ignoring internal package' "$tmp/stderr" >&2
    return 1
  }
  $GO run ./api/internal/apilist >"$tmp/new.txt"
  mkdir -p "$(dirname "$BASELINE")"
  mv "$tmp/new.x" "$BASELINE"
  mv "$tmp/new.txt" "$LISTING"
  echo "apicheck: wrote $BASELINE and $LISTING ($(wc -l <"$LISTING") exported features)"
}

case $mode in
  check) check ;;
  baseline) baseline ;;
  *) echo "usage: $0 [check|baseline]" >&2; exit 2 ;;
esac
