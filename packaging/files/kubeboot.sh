#!/bin/sh
# kubeboot runs on the Node it was built and tested with, shipped beside it,
# never on the distribution's nodejs.
# --disable-sigusr1: a signal must never open an inspector in a root process
# that holds private keys.
exec /usr/lib/kubeboot/node --disable-sigusr1 /usr/lib/kubeboot/kubeboot.cjs "$@"
