# tests/cli_lib.sh: the preamble the CLI test scripts share, sourced first:
#   . "$(dirname "$0")/cli_lib.sh" "$1"
# Sets bin (the mixprec binary given as $1, made absolute), moves into a
# fresh working directory that is removed on exit, and defines
# `fail MSG`, which reports a failure on stderr and counts it in $fails
# (each script ends with `exit $((fails > 0))`), and `spring_buffer`
# (below), the damped-spring replay buffer of the world-model CLI tests.
set -u
bin=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# spring_buffer SEED EPISODES VEL_STD REW_STD QUERIES: write buffer.npz, a
# flat replay buffer (obs, actions, rewards, next_obs, timeouts) of a damped
# spring, EPISODES x 100 steps of dt 0.1 with KNOWN noise (velocity std
# VEL_STD, reward std REW_STD, position exact), and query.npz (QUERIES
# uniform obs and actions), by /usr/bin/python3 numpy; nonzero when that
# cannot run (the scripts then skip: exit 77).
spring_buffer() {
  [ -x /usr/bin/python3 ] || return 1
  /usr/bin/python3 - "$@" <<'PYEOF'
import sys
import numpy as np
seed, E, vel_std, rew_std, nq = sys.argv[1:6]
rng = np.random.default_rng(int(seed))
E, T, dt, vel_std, rew_std = int(E), 100, 0.1, float(vel_std), float(rew_std)
obs, act, rew, nxt, tmo = [], [], [], [], []
for e in range(E):
    s = rng.uniform(-1, 1, 2)
    for t in range(T):
        a = rng.uniform(-1, 1)
        p, v = s
        n = np.array([p + dt * v, v + dt * (-p - 0.3 * v + a) + vel_std * rng.standard_normal()])
        obs.append(s); act.append([a]); nxt.append(n)
        r = -p * p
        if rew_std:
            r = r + rew_std * rng.standard_normal()
        rew.append(r); tmo.append(t == T - 1)
        s = n
f = np.float32
np.savez("buffer.npz", obs=np.array(obs, f), actions=np.array(act, f),
         rewards=np.array(rew, f), next_obs=np.array(nxt, f), timeouts=np.array(tmo))
nq = int(nq)
np.savez("query.npz", obs=rng.uniform(-1, 1, (nq, 2)).astype(f),
         actions=rng.uniform(-1, 1, (nq, 1)).astype(f))
PYEOF
}
