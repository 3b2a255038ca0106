#!/bin/sh
# kubeboot runs on the Node it was built and tested with, shipped beside it,
# never on the distribution's nodejs.
exec /usr/lib/kubeboot/node /usr/lib/kubeboot/kubeboot.cjs "$@"
