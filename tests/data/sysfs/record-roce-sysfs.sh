#!/bin/sh
# Copies what agent::ReadRdmaSysfs reads from this machine's /sys into DEST
# (a tree for tests/data/sysfs): every RDMA device with its PCI link, its
# ports' state, phys_state, link_layer, rate and non-empty GID entries with
# their types and interfaces, and the MTU, operstate and address of every
# interface an RDMA device backs. Symlinks are kept relative, as in /sys.
#   usage: record-roce-sysfs.sh DEST
set -eu
dest=${1:?usage: record-roce-sysfs.sh DEST}
sys=${SYS:-/sys}  # SYS: another tree (to check this script against a recorded one)
copy_link() {  # copy_link REL: the symlink /sys/REL, relative target kept
  mkdir -p "$dest/$(dirname "$1")"
  ln -sfn "$(readlink "$sys/$1")" "$dest/$1"
}
copy_file() {  # copy_file REL: the first line, if readable
  if v=$(head -n1 "$sys/$1" 2>/dev/null); then
    mkdir -p "$dest/$(dirname "$1")"
    printf '%s\n' "$v" > "$dest/$1"
  fi
}
for link in "$sys"/class/infiniband/*; do
  [ -e "$link" ] || continue
  dev=$(basename "$link")
  copy_link "class/infiniband/$dev"
  real=$(cd "$link" && pwd -P); rel=${real#"$sys"/}
  copy_link "$rel/device"
  for port in "$link"/ports/*; do
    p="$rel/ports/$(basename "$port")"
    for f in state phys_state link_layer rate; do copy_file "$p/$f"; done
    for g in "$port"/gids/*; do
      i=$(basename "$g")
      case $(head -n1 "$g") in 0000:0000:0000:0000:0000:0000:0000:0000) continue ;; esac
      copy_file "$p/gids/$i"
      copy_file "$p/gid_attrs/types/$i"
      copy_file "$p/gid_attrs/ndevs/$i"
    done
  done
  for net in "$link"/device/net/*; do
    [ -e "$net" ] || continue
    nd=$(basename "$net")
    copy_link "class/net/$nd"
    nreal=$(cd "$sys/class/net/$nd" && pwd -P); nrel=${nreal#"$sys"/}
    for f in mtu operstate address; do copy_file "$nrel/$f"; done
  done
done
echo "recorded into $dest"
