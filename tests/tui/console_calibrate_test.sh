#!/bin/bash
# pipetop demo, driven in tmux: after --calibrate-after steps of generation 1
# the console calibrates the cost model from the run by itself (the status
# line says so, the run folder gets the calibrated profile), and the plan
# view's running plan is then predicted from it, labelled "calibrated g1",
# beside its measurement. Checked: the figures appear with their labels, the
# calibrated profile is one pipetop accepts and names the run, and with no
# edit there is no "edited" line (the edited plan is the running one). How
# close the prediction comes to the measurement is a quiet-machine figure
# (docs/benchmarks.md), not checked here.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"
RUN="$TM_DIR/run"

tm_start 120 40 "$PIPETOP demo --data synthetic --calibrate-after 200 --run-dir '$RUN'"
tm_check "agents register and train" tm_wait 120 'live gen 1, 4 agents \| step [0-9]+'
tm_keys 1
# 200 steps (not the default 10) leave a loaded machine time to draw the
# plan view before the fit: CI saw the console starved past step 10
tm_check "before calibration: analytic, the profile's origin named" \
    tm_wait 20 'predicted +[0-9.]+ ms.*\(analytic'
tm_check "the console calibrates by itself (status line)" tm_wait 120 'calibrated on generation 1'
tm_check "running plan's prediction, labelled calibrated" \
    tm_wait 10 'predicted +[0-9.]+ ms.*\(calibrated g1'
tm_check "running plan's measurement" tm_wait 30 'measured +[0-9.]+ ms.*\((med|median of)'
scr=$(tm_cap)
rn=$(grep -oE 'predicted +[0-9.]+ ms' <<<"$scr" | grep -oE '[0-9]+\.[0-9]+')
ms=$(grep -oE 'measured +[0-9.]+ ms' <<<"$scr" | grep -oE '[0-9]+\.[0-9]+')
echo "figures (not checked; a quiet-machine measurement): calibrated prediction $rn ms, measured $ms ms"
tm_check "unedited: no edited line" bash -c "! grep -q 'edited:' <<<\"\$1\"" _ "$scr"
tm_check "calibrated profile written" test -s "$RUN/calibrated-gen-1.json"
tm_check "it validates" "$PIPETOP" validate profile "$RUN/calibrated-gen-1.json"
tm_check "it names the run" grep -q "\"run\":[[:space:]]*\"$RUN\"" "$RUN/calibrated-gen-1.json"
tm_check "q exits with 0" tm_quit_ok
tm_summary
