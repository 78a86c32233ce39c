#!/usr/bin/env bash
# Mutants (issue 7): each docs/invariants.md invariant has test-only mutants that break it on
# purpose at the one point the code enforces it (the list: wal/format/src/mutants.rs; grep for
# "Mutant (tools/mutants.sh" to see each change). A build carries one when the environment
# variable WAL_MUTANT names it (never a cargo feature: a dependent of the engine could switch a
# feature on). For every mutant this runs the test targets meant to catch it with that mutant
# built in, one target at a time:
#
#   caught    the target failed (or timed out) with the mutant on
#   passed    the target passed with the mutant on
#
# A mutant is PASS when at least one target caught it, SURVIVED otherwise; the script exits 1 if
# any mutant survived or failed to build, 2 if a target fails without any mutant (the baseline
# run, first). Not part of .ci/run: every mutant rebuilds wal and what depends on it (about
# 10-15 minutes in all on 2 cores).
#
#   tools/mutants.sh                              # every mutant
#   tools/mutants.sh mutant-ack-before-sync ...   # some of them (the name without mutant- also works)
#   MUTANTS_SKIP_BASELINE=1 tools/mutants.sh      # skip the run without mutants
#   MUTANTS_TIMEOUT=300 (seconds per target run), MUTANTS_JOBS=2 (cargo -j)
#
# Logs: $CARGO_TARGET_DIR/mutants/ (or target/mutants/), one file per mutant and target.
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
JOBS=${MUTANTS_JOBS:-2}
TIMEOUT=${MUTANTS_TIMEOUT:-300}
LOGS=${CARGO_TARGET_DIR:-target}/mutants
mkdir -p "$LOGS"
# The baseline and every build but a mutant's own carry none.
unset WAL_MUTANT

# name | invariant | WAL_MUTANT | targets (package:lib|test:name[:filter], space separated; a
# filter such as `io_thread::` runs one module of a crate's test binary)
TABLE=(
  "mutant-apply-before-commit|I1|apply-before-commit|wal-state:test:state:pipeline::"
  "mutant-replay-ignores-dedupe|I2|replay-ignores-dedupe|wal-state:test:state:apply_seam:: wal-state:test:state:pipeline::"
  "mutant-ack-before-sync|I3|ack-before-sync|wal:test:engine:io_thread:: wal:test:engine:pipelining:: wal-sim:test:fault_sweep:fast_subset walcheck:test:kill9 wal-powerloss:test:powerloss:powerloss::"
  "mutant-ack-before-write|I3|ack-before-write|walcheck:test:kill9"
  "mutant-no-dir-sync|I3|no-dir-sync|wal-powerloss:test:powerloss:powerloss::"
  "mutant-attested-damage-as-torn|I4|attested-damage-as-torn|wal-format:lib:classify wal:test:engine:corruption:: wal-sim:test:fault_sweep:fast_subset"
  "mutant-append-blocks-on-sync|I5|append-blocks-on-sync|wal:test:engine:append_returns_while_the_sync_of_its_own_batch_is_held"
  "mutant-no-fence-on-sync-error|I6|no-fence-on-sync-error|wal:test:engine:recovery_modes:: wal:test:engine:io_thread:: wal:test:engine:pipelining:: wal-sim:test:fault_sweep:fast_subset"
  "mutant-stale-epoch-accepted|I7|stale-epoch-accepted|wal:test:engine:basic:: wal:test:engine:io_thread:: wal-state:test:state:pipeline:: wal-sim:test:fault_sweep:fast_subset"
  "mutant-no-divergence-fence|I8|no-divergence-fence|wal-state:test:state:pipeline::"
  "mutant-rename-skips-name-check|I9|rename-skips-name-check|catalog:test:catalog:rules:: catalog:test:catalog:pipeline_races::"
  "mutant-version-not-advanced|I9|version-not-advanced|catalog:test:catalog:rules:: catalog:test:catalog:pipeline_races::"
)

# What a target's failure must say to count as catching a mutant; a target not listed here
# catches it by failing at all. The power-loss suite can also fail for reasons of its own (a
# workload that errs, a mount that fails), which are not the mutant being caught.
declare -A MUST_SAY=(
  ["wal-powerloss:test:powerloss:powerloss::"]="images lost acknowledged data"
)

# cargo arguments for one target spec
target_args() {
  local pkg kind name filter
  IFS=: read -r pkg kind name filter <<<"$1"
  if [[ $kind == lib ]]; then
    echo "-p $pkg --lib ${name:-}"
  else
    echo "-p $pkg --test $name ${filter:-}"
  fi
}

# the names of the failed tests in a log, comma separated
failed_tests() {
  grep -E '^test .* \.\.\. FAILED$' "$1" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' | paste -sd, -
}

SELECTED=("$@")

start_all=$(date +%s)
if [[ -z ${MUTANTS_SKIP_BASELINE:-} ]]; then
  declare -A seen=()
  for row in "${TABLE[@]}"; do
    IFS='|' read -r name inv mutant targets <<<"$row"
    [[ ${#SELECTED[@]} -gt 0 ]] && ! printf '%s\n' "${SELECTED[@]}" | grep -qx -e "$name" -e "$mutant" && continue
    for t in $targets; do seen[$t]=1; done
  done
  for t in "${!seen[@]}"; do
    log="$LOGS/baseline-${t//:/-}.log"
    # shellcheck disable=SC2046
    if ! timeout "$TIMEOUT" cargo test -j "$JOBS" $(target_args "$t") >"$log" 2>&1; then
      echo "baseline: $t fails without any mutant (see $log); fix that first" >&2
      exit 2
    fi
    echo "baseline: $t passes without mutants"
  done
fi

survived=0
rows=()
for row in "${TABLE[@]}"; do
  IFS='|' read -r name inv mutant targets <<<"$row"
  [[ ${#SELECTED[@]} -gt 0 ]] && ! printf '%s\n' "${SELECTED[@]}" | grep -qx -e "$name" -e "$mutant" && continue
  t0=$(date +%s)
  caught=()
  passed=()
  broken=""
  for t in $targets; do
    log="$LOGS/$name-${t//:/-}.log"
    # Build first, so a mutant that does not compile is not counted as caught.
    # shellcheck disable=SC2046
    if ! WAL_MUTANT="$mutant" cargo test -j "$JOBS" --no-run $(target_args "$t") >"$log" 2>&1; then
      broken="build failed ($log)"
      break
    fi
    # shellcheck disable=SC2046
    WAL_MUTANT="$mutant" timeout "$TIMEOUT" cargo test -j "$JOBS" $(target_args "$t") >>"$log" 2>&1
    rc=$?
    if [[ $rc -eq 0 ]]; then
      passed+=("$t")
    elif [[ $rc -eq 124 ]]; then
      caught+=("$t (timed out after ${TIMEOUT}s)")
    elif [[ -n ${MUST_SAY[$t]:-} ]] && ! grep -q "${MUST_SAY[$t]}" "$log"; then
      passed+=("$t (it failed, but not saying \"${MUST_SAY[$t]}\": $log)")
    else
      caught+=("$t ($(failed_tests "$log"))")
    fi
  done
  secs=$(($(date +%s) - t0))
  if [[ -n $broken ]]; then
    verdict="BROKEN"
    survived=$((survived + 1))
  elif [[ ${#caught[@]} -gt 0 ]]; then
    verdict="PASS"
  else
    verdict="SURVIVED"
    survived=$((survived + 1))
  fi
  line="$verdict  $inv  $name  (${secs}s)"
  echo "$line"
  [[ -n $broken ]] && echo "    $broken"
  for c in "${caught[@]+"${caught[@]}"}"; do echo "    caught by $c"; done
  for p in "${passed[@]+"${passed[@]}"}"; do echo "    passed:   $p"; done
  rows+=("$line")
done

echo
echo "mutants: ${#rows[@]} run, $survived survived or broken, $(($(date +%s) - start_all)) s in all"
[[ $survived -eq 0 ]]
