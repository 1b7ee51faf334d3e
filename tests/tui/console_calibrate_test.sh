#!/bin/bash
# pipetop demo, driven in tmux: after PT_LIVE_CAL_STEPS steps of generation 1
# the console calibrates the cost model from the run by itself (the status
# line says so, the run folder gets the calibrated profile), and the plan
# view then shows three labelled figures: the edited plan's prediction, now
# "calibrated on gen 1", and the running plan's prediction and measurement.
# Checked: the figures appear, the calibrated profile is one pipetop accepts
# and names the run, and the edited plan (not yet edited: the running plan)
# is predicted the same in both lines. How close the prediction comes to the
# measurement is a quiet-machine figure (docs/benchmarks.md), not checked here.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"
RUN="$TM_DIR/run"

tm_start 120 40 "$PIPETOP demo --data synthetic --run-dir '$RUN'"
tm_check "agents register and train" tm_wait 120 'live gen 1, 4 agents \| step [0-9]+'
tm_keys 1
tm_check "before calibration: the profile's origin is named" \
    tm_wait 20 'iteration +[0-9.]+ ms predicted, (analytic|measured|imported|calibrated( g1)?)'
tm_check "the console calibrates by itself (status line)" tm_wait 120 'calibrated on generation 1'
tm_check "edited plan's prediction, labelled calibrated" \
    tm_wait 10 'iteration +[0-9.]+ ms predicted, calibrated g1'
tm_check "running plan's prediction" tm_wait 30 'running +[0-9.]+ ms predicted'
tm_check "running plan's measurement" tm_wait 30 'running +[0-9.]+ ms measured \([0-9]+ steps\)'
scr=$(tm_cap)
ed=$(grep -oE 'iteration +[0-9.]+ ms predicted' <<<"$scr" | grep -oE '[0-9]+\.[0-9]+')
rn=$(grep -oE 'running +[0-9.]+ ms predicted' <<<"$scr" | grep -oE '[0-9]+\.[0-9]+')
ms=$(grep -oE 'running +[0-9.]+ ms measured' <<<"$scr" | grep -oE '[0-9]+\.[0-9]+')
echo "figures (not checked; a quiet-machine measurement): calibrated prediction $rn ms, measured $ms ms"
tm_check "unedited: edited plan $ed ms = running plan $rn ms" test -n "$ed" -a "$ed" = "$rn"
tm_check "calibrated profile written" test -s "$RUN/calibrated-gen-1.json"
tm_check "it validates" "$PIPETOP" validate profile "$RUN/calibrated-gen-1.json"
tm_check "it names the run" grep -q "\"run\":[[:space:]]*\"$RUN\"" "$RUN/calibrated-gen-1.json"
tm_check "q exits with 0" tm_quit_ok
tm_summary
