# Install, upgrade and removal steps shared by the .deb maintainer scripts and
# the .rpm scriptlets (build.sh pastes this file in front of each). POSIX sh;
# quiet; safe to repeat; correct in a chroot or image build where systemd is
# not running (systemctl enable/disable still work there, offline).

kubeboot_unit=kubeboot.service
# Cluster side, disabled by default: never enabled here, but stopped,
# disabled and restarted with the package like the node unit.
kubeboot_approver_unit=kubeboot-approver.service
# Set on removal (deb prerm, rpm preun), so a reinstall from dpkg's config-files
# state (which looks like an upgrade) enables the unit again.
kubeboot_removed_marker=/var/lib/kubeboot/.package-removed

systemd_running() { [ -d /run/systemd/system ]; }
have_systemctl() { command -v systemctl >/dev/null 2>&1; }

kubeboot_create_dirs() {
	if command -v systemd-tmpfiles >/dev/null 2>&1 &&
		systemd-tmpfiles --create /usr/lib/tmpfiles.d/kubeboot.conf >/dev/null 2>&1; then
		return 0
	fi
	mkdir -p /var/lib/kubeboot && chmod 0700 /var/lib/kubeboot
}

kubeboot_has_credentials() {
	# bootstrap-token: written by `kubeboot user-data` together with the join settings.
	[ -e /etc/kubernetes/bootstrap-kubelet.conf ] || [ -e /etc/kubernetes/kubelet.conf ] || [ -e /etc/kubernetes/bootstrap-token ]
}

kubeboot_daemon_reload() {
	if systemd_running; then systemctl daemon-reload >/dev/null 2>&1 || :; fi
}

kubeboot_installed() {
	kubeboot_create_dirs
	rm -f "$kubeboot_removed_marker"
	kubeboot_daemon_reload
	if have_systemctl; then systemctl --quiet enable "$kubeboot_unit" >/dev/null 2>&1 || :; fi
	# --no-block: readiness waits for CSR approval, which may take minutes;
	# the package manager must not. Without credentials there is nothing to
	# do yet: the unit starts at the next boot or `systemctl start kubeboot`.
	if systemd_running && kubeboot_has_credentials; then
		systemctl --no-block start "$kubeboot_unit" >/dev/null 2>&1 || :
	fi
}

kubeboot_upgraded() {
	kubeboot_create_dirs
	kubeboot_daemon_reload
	# Restarts only a running daemon; one stopped by the operator stays so.
	if systemd_running; then systemctl --no-block try-restart "$kubeboot_unit" "$kubeboot_approver_unit" >/dev/null 2>&1 || :; fi
}

# Runs while the unit file still exists: disable needs it.
kubeboot_removing() {
	if systemd_running; then systemctl stop "$kubeboot_unit" "$kubeboot_approver_unit" >/dev/null 2>&1 || :; fi
	if have_systemctl; then systemctl --quiet disable "$kubeboot_unit" "$kubeboot_approver_unit" >/dev/null 2>&1 || :; fi
	if [ -d /var/lib/kubeboot ]; then : >"$kubeboot_removed_marker"; fi
}

# Only kubeboot's own state (pending keys, CSR names). The credentials it
# wrote for the kubelet and kube-proxy stay: the node keeps working without
# kubeboot, and deleting them would take it out of the cluster.
kubeboot_purged() {
	rm -rf /var/lib/kubeboot
}
