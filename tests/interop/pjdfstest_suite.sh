#!/bin/sh
# In the rxe VM (busybox sh), for tests/interop/nfs_pjdfstest.sh: every pjdfstest .t of the share
# (/mnt/host/tests, or the directories and files listed in /mnt/host/only) run in a scratch
# directory of each MOUNTPOINT, file by file in turn on each (so that a run cut short has compared
# the files it got through); per file and mount a line "R LABEL FILE PASSED FAILED", per failed
# assertion "F LABEL FILE N" and the first three failures in full ("D ...").
#   pjdfstest_suite.sh MOUNTPOINT LABEL [MOUNTPOINT LABEL ...]
export PATH=/mnt/host/shim:$PATH
only=$(cat /mnt/host/only 2>/dev/null)
pairs="$*"
set -- $pairs
while [ $# -ge 2 ]; do mkdir -p "$1/pjd.$2" || exit 1; shift 2; done
for t in $(cd /mnt/host/tests && find ${only:-.} -name '*.t' | sort); do
  t=${t#./}
  set -- $pairs
  while [ $# -ge 2 ]; do
    cd "$1/pjd.$2" || exit 1
    timeout 600 sh "/mnt/host/tests/$t" > /tmp/t.out 2>/dev/null
    echo "R $2 $t $(grep -c '^ok ' /tmp/t.out) $(grep -c '^not ok ' /tmp/t.out)"
    grep '^not ok ' /tmp/t.out | awk -v l="$2" -v t="$t" '{print "F", l, t, $3}'
    grep '^not ok ' /tmp/t.out | head -3 | sed "s|^|D $2 $t |"
    shift 2
  done
done
cd /
