#!/bin/sh
# In the rxe VM (busybox sh), for tests/interop/nfs_pjdfstest.sh: every pjdfstest .t of the share
# (/mnt/host/tests, or the directories listed in /mnt/host/only) run in a scratch directory of
# MOUNTPOINT; per file a line "R LABEL FILE PASSED FAILED", per failed assertion "F LABEL FILE N"
# and the first three failures in full ("D ...").
#   pjdfstest_suite.sh MOUNTPOINT LABEL
export PATH=/mnt/host/shim:$PATH
w=$1/pjd.$2
mkdir -p "$w" || exit 1
only=$(cat /mnt/host/only 2>/dev/null)
for t in $(cd /mnt/host/tests && find ${only:-.} -name '*.t' | sort); do
  t=${t#./}
  cd "$w" || exit 1
  timeout 600 sh "/mnt/host/tests/$t" > /tmp/t.out 2>/dev/null
  echo "R $2 $t $(grep -c '^ok ' /tmp/t.out) $(grep -c '^not ok ' /tmp/t.out)"
  grep '^not ok ' /tmp/t.out | awk -v l="$2" -v t="$t" '{print "F", l, t, $3}'
  grep '^not ok ' /tmp/t.out | head -3 | sed "s|^|D $2 $t |"
done
cd /
