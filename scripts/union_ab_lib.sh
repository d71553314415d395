# Sourced by the A-B scripts of union mounts (scripts/follower_ab.sh,
# scripts/follower_load_ab.sh): starts (or reuses) the single-host Ceph
# cluster of scripts/ceph-dev.sh, names two stores NS-$1 and NS-$2 of a
# namespace prefix of its own (NS; SPEC = their union), makes WORK anew and
# removes both stores, their mounts (WORK/mnt_$1, WORK/mnt_$2) and WORK
# when the script exits.
#   union_ab_setup PREFIX FIRST SECOND
union_ab_setup() {
  eval "$(scripts/ceph-dev.sh start)"
  NS=$1-$$-$RANDOM
  UNION_MEMBERS=("$2" "$3")
  SPEC=rados:lmcfs/$NS-$2,$NS-$3
  trap union_ab_cleanup EXIT
  rm -rf "$WORK"
  mkdir -p "$WORK/mnt_$2" "$WORK/mnt_$3"
}
union_ab_cleanup() {
  for m in "${UNION_MEMBERS[@]}"; do
    fusermount3 -u -z "$WORK/mnt_$m" 2>/dev/null || true
  done
  for m in "${UNION_MEMBERS[@]}"; do
    rados -p lmcfs -N "$NS-$m" ls 2>/dev/null | while read -r o; do rados -p lmcfs -N "$NS-$m" rm "$o"; done
  done
  rm -rf "$WORK"
}
