#!/bin/sh
# GPU Portal's dev environment: sshd as this container's own user (never root), then the given command
# (JupyterLab by default), so SSH, scp, rsync, VS Code Remote-SSH and the notebook share one container.
#
# - $HOME becomes the home workspace the portal mounted (GPUPORTAL_HOME_WORKSPACE), so files made over SSH
#   are the notebook's files and outlive the container.
# - sshd's host key lives in that workspace too, so it stays the same across restarts (no "REMOTE HOST
#   IDENTIFICATION HAS CHANGED" for the person's ssh or VS Code).
# - Its config is written to a private directory under /tmp at each start; sessions get the container's
#   environment (NVIDIA_VISIBLE_DEVICES, CUDA_*, GPUPORTAL_*, the launch form's variables) through SetEnv,
#   since a non-root sshd cannot pass on its own environment otherwise.
# - The keys are the portal's authorized_keys file (GPUPORTAL_SSH_AUTHORIZED_KEYS, from a Secret it keeps
#   up to date); passwords and keyboard-interactive logins are off.
set -eu
if [ -n "${GPUPORTAL_HOME_WORKSPACE:-}" ] && [ -d "$GPUPORTAL_HOME_WORKSPACE" ] && [ -w "$GPUPORTAL_HOME_WORKSPACE" ]; then
  export HOME="$GPUPORTAL_HOME_WORKSPACE"
  cd "$HOME"
fi
umask 077
keys_dir="$HOME/.config/gpuportal-sshd"
mkdir -p "$keys_dir"
if [ ! -s "$keys_dir/ssh_host_ed25519_key" ]; then
  ssh-keygen -q -t ed25519 -N '' -C "gpuportal-${GPUPORTAL_WORKLOAD:-devenv}" -f "$keys_dir/ssh_host_ed25519_key"
fi
run_dir="$(mktemp -d /tmp/gpuportal-sshd.XXXXXX)"
conf="$run_dir/sshd_config"
{
  echo "Port ${GPUPORTAL_SSH_PORT:-2222}"
  echo "HostKey $keys_dir/ssh_host_ed25519_key"
  echo "PidFile $run_dir/sshd.pid"
  echo "AuthorizedKeysFile ${GPUPORTAL_SSH_AUTHORIZED_KEYS:-/etc/gpuportal/ssh/authorized_keys}"
  echo "PubkeyAuthentication yes"
  echo "PasswordAuthentication no"
  echo "KbdInteractiveAuthentication no"
  echo "UsePAM no"
  echo "PermitRootLogin no"
  # The key file is the kubelet's (behind its symlinks) and the home a shared volume with fsGroup: sshd's
  # ownership checks would refuse both, and there is no other account here to protect them from.
  echo "StrictModes no"
  echo "AllowAgentForwarding no"
  echo "X11Forwarding no"
  echo "AllowTcpForwarding local"
  echo "PermitTunnel no"
  echo "PrintMotd no"
  echo "ClientAliveInterval 60"
  echo "Subsystem sftp internal-sftp"
  # One SetEnv line: sshd takes the first of each keyword.
  printf 'SetEnv'
  env | while IFS='=' read -r name value; do
    case "$name" in
      ''|*[!A-Za-z0-9_]*|PWD|OLDPWD|SHLVL|HOSTNAME|_|TERM) continue ;;
    esac
    case "$value" in *'"'*|*'\'*) continue ;; esac
    printf ' "%s=%s"' "$name" "$value"
  done
  printf '\n'
} > "$conf"
# In the foreground of a background job, logging to stderr: its lines are in the container's log
# (`gpuportal logs`), and it stays a child of the main command, which replaces this shell.
umask 022
/usr/sbin/sshd -t -f "$conf"
/usr/sbin/sshd -D -e -f "$conf" &
exec "$@"
