#!/bin/sh
# A workload for the harness's own test: files made durable the POSIX way (write, fsync the file,
# rename, fsync the directory), each acknowledged as `ack N`. The kind `liar` acknowledges before
# any fsync, the mistake the suite exists to catch.
#   files-workload.sh run honest|liar --dir D --seed S [--handshake | --marks FILE]
# With --marks each ack line is appended to FILE (the recorder's marks file) instead of printed.
#   files-workload.sh check honest|liar --dir D --acks FILE
set -eu
cmd=$1 kind=$2
shift 2
dir= acks=/dev/null marks=
while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --acks) acks=$2; shift 2 ;;
    --marks) marks=$2; shift 2 ;;
    --seed) shift 2 ;;
    *) shift ;;
  esac
done
ack() {
  if [ -n "$marks" ]; then
    echo "ack $1" >>"$marks"
  else
    echo "ack $1"
    read -r _
  fi
}
if [ "$cmd" = run ]; then
  mkdir "$dir"
  sync "$(dirname "$dir")"
  for i in 1 2 3 4 5 6; do
    printf 'entry %s\n' "$i" >"$dir/f$i.tmp"
    if [ "$kind" = honest ]; then
      sync "$dir/f$i.tmp"
      mv "$dir/f$i.tmp" "$dir/f$i"
      sync "$dir"
      ack "$i"
    else
      mv "$dir/f$i.tmp" "$dir/f$i"
      ack "$i"
      sleep 0.05
      sync "$dir/f$i"
      sync "$dir"
    fi
  done
  echo done
else
  n=0
  while read -r _ i; do
    if [ "$(cat "$dir/f$i" 2>/dev/null)" != "entry $i" ]; then
      echo "FAIL: f$i acknowledged and missing or wrong"
      exit 1
    fi
    n=$((n + 1))
  done <"$acks"
  echo "ok required=$n"
fi
