#!/bin/sh
# kubeboot runs on the Node it was built and tested with, shipped beside it,
# never on the distribution's nodejs.
# --disable-sigusr1: a signal must never open an inspector in a root process
# that holds private keys.
# NODE_COMPILE_CACHE: Node keeps the compiled bundle in /var/cache/kubeboot
# (root only, 0700, made by tmpfiles.d and the unit's CacheDirectory=), so each
# start after the first skips most parsing and compiling. Only for root: a
# cache another user can write would be code that root runs.
if [ -z "${NODE_COMPILE_CACHE+x}" ] && [ "$(id -u)" = 0 ]; then
  NODE_COMPILE_CACHE=/var/cache/kubeboot
  export NODE_COMPILE_CACHE
fi
# NODE_OPTIONS is dropped, from a shell, an EnvironmentFile or systemd's
# DefaultEnvironment= alike: it would reach the daemon and every pass, where
# --inspect undoes --disable-sigusr1, and --report-on-signal and
# --heapsnapshot-signal fire on SIGUSR2, which `kubeboot renew` sends: the
# report carries the environment (KUBEBOOT_TOKEN), the snapshot the heap (the
# kubelet's private key). To debug, run /usr/lib/kubeboot/node directly.
unset NODE_OPTIONS
# --max-semi-space-size=1 for the long-running commands: V8 otherwise keeps up
# to 16 MiB of young generation that an idle daemon has long emptied; 1 MiB
# takes about 9 MiB off an idle `kubeboot run` (docs/benchmarks.md) for a
# few more young collections during a pass. One-shot commands keep the default.
# --lite-mode for `run`, which only rests and starts passes (each pass runs
# without it): V8 trades speed it does not need for about 10 MiB.
# kubeboot adds both itself when started without them (`node kubeboot.cjs
# run`: it execs itself again, same pid; agent/node-flags.ts); given here,
# the same list, they spare that second start.
heap=
case "${1-}" in
  run) heap="--max-semi-space-size=1 --lite-mode" ;;
  approver) heap=--max-semi-space-size=1 ;;
esac
exec /usr/lib/kubeboot/node --disable-sigusr1 $heap /usr/lib/kubeboot/kubeboot.cjs "$@"
