#!/usr/bin/env bash
# Stop only the daemons slurm-up.sh started (by the PIDs it recorded), then wait for them to exit.
set -uo pipefail
state=${GRADLANES_SLURM_DIR:-/tmp/gradlanes-slurm}
[ -f "$state/pids" ] || exit 0
tac "$state/pids" | while read -r name pid; do
    if [ "$name" = link ]; then
        [ -L "$pid" ] && rm -f "$pid" && echo "removed link $pid"
        continue
    fi
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        echo "stopped $name ($pid)"
    fi
done
rm -f "$state/pids"
