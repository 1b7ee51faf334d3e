#!/bin/bash
# The console on a recorded run (tests/data/run-dapple4: 4 stages, DAPPLE, 4
# micro-batches), driven in tmux: the timeline shows one row per stage replica
# with the micro-batch numbers in its blocks and forward/backward told apart
# by glyph; stepping the replay advances the step shown; the layout stays
# intact at 80x24 and 200x60 and across resizes; help lists the keys; x
# exports files; q exits with status 0. A record that folded its steps
# (record version 4) still shows them on the timeline.
set -u
. "${PT_SOURCE_DIR:?}/tests/tui/tmux_lib.sh"
RUN="$PT_SOURCE_DIR/tests/data/run-dapple4"

# rows_have_labels: every stage row s0r0..s3r0 carries each micro-batch 0..3
rows_have_labels() {
    local screen s row m
    screen=$(tm_cap)
    for s in 0 1 2 3; do
        row=$(printf '%s\n' "$screen" | grep -m1 "^│s${s}r0 " | sed "s/^│s${s}r0 *//; s/│\$//")
        [ -n "$row" ] || { echo "no row s${s}r0" >&2; return 1; }
        for m in 0 1 2 3; do
            case "$row" in *"$m"*) ;; *) echo "row s${s}r0 lacks micro-batch $m: $row" >&2; return 1 ;; esac
        done
        case "$row" in *"#"*) ;; *) echo "row s${s}r0 shows no backward glyph" >&2; return 1 ;; esac
    done
}

# 1. the whole record at once, 200x60: rows and labels of one iteration
tm_start 200 60 "$PIPETOP replay '$RUN' --end"
tm_check "timeline appears" tm_wait 15 'measured timeline'
tm_check "layout at 200x60" tm_layout_ok 200 60
tm_keys i # one iteration: blocks wide enough for every label
tm_check "one iteration shown" tm_wait 5 'last 1 iterations'
tm_check "stage rows carry micro-batch labels 0-3" rows_have_labels
tm_check "comm lanes shown" tm_wait 2 '^│  comm'
tm_check "the legend tells glyphs" tm_wait 2 '3=== fwd  3### bwd'

# resize to 80x24 and back: the frame follows the terminal
tm_resize 80 24
tm_check "stage rows after resize to 80x24" tm_wait 5 '^│s3r0 '
tm_check "layout at 80x24" tm_layout_ok 80 24
tm_resize 200 60
tm_check "layout back at 200x60" tm_layout_ok 200 60

# other views at both sizes
for v in 1 3 4; do
    tm_keys $v
    tm_settle 5 # the switch is drawn (two captures alike)
    tm_check "view $v layout at 200x60" tm_layout_ok 200 60
done
tm_resize 80 24
for v in 1 3 4 2; do
    tm_keys $v
    tm_settle 5
    tm_check "view $v layout at 80x24" tm_layout_ok 80 24
done
tm_keys 3
tm_check "stats view shows graphs" tm_wait 5 'throughput \(samples/s\)'
tm_check "stats view shows loss" tm_wait 2 '─ loss ─'
tm_keys 4
tm_check "agents view lists the 4 agents" tm_wait 5 'agents: 4'
tm_check "agents have their stage" tm_wait 2 's3r0 +stopped'

# help lists every key, Esc closes it
tm_resize 120 60
tm_keys '?'
tm_check "help lists apply & restart" tm_wait 5 'apply & restart'
tm_check "help lists the replay keys" tm_wait 2 'pause / resume the replay'
tm_keys Escape
tm_check "Esc leaves help" tm_wait_gone 5 'pause / resume the replay'

# x exports the shown timeline
tm_keys 2 x
tm_check "export reported" tm_wait 5 'exported the measured timeline'
tm_check "trace file written" bash -c "ls '$TM_DIR'/pipetop-*.json >/dev/null 2>&1"
tm_check "svg file written" bash -c "ls '$TM_DIR'/pipetop-*.svg >/dev/null 2>&1"
tm_check "q exits with 0" tm_quit_ok

# 2. stepping: paused at the start, n applies one step at a time
tm_start 100 30 "$PIPETOP replay '$RUN' --paused --view stats"
tm_check "paused replay starts" tm_wait 10 'replay 1x paused'
tm_keys n
tm_check "n shows step 0" tm_wait 5 'step 0 '
tm_keys n
tm_check "n again shows step 1" tm_wait 5 'step 1 '
tm_keys e
tm_check "e jumps to the end" tm_wait 5 'step 4 '
tm_check "q exits with 0" tm_quit_ok

# 3. a record that folded its steps (64 agents, stage 0 of 61 replicas folded
# per stage outside the full-detail windows; its replica 7, agent w7, 60 %
# slower): a folded step is still drawn, ':' over the time each stage ran,
# the band the record kept under the row, and its straggler listed and kept
# by the agents view's "!"
"$PT_BUILD_DIR/record_growth" --hours 0.03 --step-ms 1000 --agents 64 --slow 7:60 \
    --dir "$TM_DIR/folded" --source "$RUN/run.ndjson" >/dev/null ||
    tm_fail "record_growth failed"
tm_start 120 40 "$PIPETOP replay '$TM_DIR/folded' --paused"
tm_check "paused replay of the folded record starts" tm_wait 10 'replay 1x paused'
for _ in $(seq 50); do tm_keys n; done
tm_check "step 49 reached" tm_wait 10 'step 49 '
tm_check "stage 0's row is its folded step" tm_wait 5 '^│s0 ! +:::'
tm_check "its band is the folded one" tm_wait 2 '^│ x61 +band .* ms/it \(min\|med\|max\), folded'
tm_check "a one-replica stage's folded step too" tm_wait 2 '^│s1 +[.]*:::'
tm_check "the legend names ':'" tm_wait 2 ': folded'
tm_check "the timeline's newest step is folded too" tm_wait 2 'to step 4[89] '
tm_check "the folded band has its straggler" tm_wait 2 'folded .:.  ! 1 straggler'
tm_check "the straggler listed: the record's slowest replica" \
    tm_wait 2 'stragglers: stage 0 replica 7 \+[0-9]+ %'
tm_keys x
tm_check "x on folded steps says why nothing is exported" \
    tm_wait 5 'export: these steps are folded in the record \(no ops kept\)'
tm_keys Enter
tm_check "Enter on a folded stage shows its one row" tm_wait 5 '^│s0 all! +:::'
tm_keys 4 '!'
tm_check "agents: ! keeps the straggler only" tm_wait 5 'stragglers only \(1\)'
tm_check "  w7, of stage 0 replica 7" tm_wait 2 '^│!w7 .* s0r7 '
tm_check "q exits with 0" tm_quit_ok

# 4. pipetop status --json: one snapshot of the same record, for scripts
json=$("$PIPETOP" status --json "$RUN")
tm_check "status names the last step (4)" bash -c "printf '%s' '$json' | grep -q '\"last_step\":4,'"
tm_check "status has 5 steps" bash -c "printf '%s' '$json' | grep -q '\"steps\":5,'"
tm_check "status lists the 4 agents" test "$(printf '%s' "$json" | grep -o '"id":"w[0-9]"' | wc -l)" -eq 4
events=$(grep -o '"op":"' "$RUN/run.ndjson" | wc -l)
tm_check "status counts every event of the record ($events)" \
    bash -c "printf '%s' '$json' | grep -q '\"events\":$events,'"

tm_summary
