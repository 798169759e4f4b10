"""deploy/systemd/: the units install and verify together, each is complete (started at boot, as its own user, after
the database and Redis, with the one settings file), the metrics directory's tmpfiles.d snippet creates it, and the
deployment guide's `systemctl` lines name units that exist."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import running_in_ci
from tests.servers import PROJECT_DIR, TURNLOG

UNITS_DIR = PROJECT_DIR / "deploy" / "systemd"
GUIDE = PROJECT_DIR / "docs" / "guide" / "deploy.md"
SYSTEM_UNITS = Path("/usr/lib/systemd/system")  # systemd's own (multi-user.target, sysinit.target...), for --root
UNITS = sorted(path.name for path in UNITS_DIR.glob("*.service"))
SERVICES = {"turnlog-daphne@.service", "turnlog-worker.service"}  # the long-running ones, with the watchdog
INSTALLED_TURNLOG = "/opt/turnlog/venv/bin/turnlog"
SETTINGS_FILE = "/etc/turnlog.env"


def entries(unit: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of each line of a unit file, in order (keys may repeat: ExecStart= of a oneshot)."""
    section, found = "", []
    for line in (UNITS_DIR / unit).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        found.append((section, key.strip(), value.strip()))
    return found


def values(unit: str, section: str, key: str) -> list[str]:
    return [v for s, k, v in entries(unit) if (s, k) == (section, key)]


def words(unit: str, section: str, key: str) -> set[str]:
    return {word for value in values(unit, section, key) for word in value.split()}


def needs(tool: str) -> str:
    path = shutil.which(tool) or f"/usr/bin/{tool}"
    if not os.path.exists(path):
        if running_in_ci():
            pytest.fail(f"{tool} is not installed; CI must install systemd")
        pytest.skip(f"{tool} is not installed")
    return path


def test_the_units_are_the_server_template_the_worker_and_the_migration():
    assert UNITS == ["turnlog-daphne@.service", "turnlog-migrate.service", "turnlog-worker.service"]


@pytest.mark.parametrize("unit", UNITS)
def test_each_unit_starts_at_boot_as_turnlog_after_the_database_and_redis_with_one_settings_file(unit):
    assert values(unit, "Install", "WantedBy") == ["multi-user.target"]
    assert values(unit, "Service", "User") == ["turnlog"]
    assert values(unit, "Service", "Group") == ["turnlog"]
    assert {"network-online.target", "postgresql.service", "redis-server.service"} <= words(unit, "Unit", "After")
    assert "network-online.target" in words(unit, "Unit", "Wants")  # After= alone orders, it does not pull it in
    # One source of settings: Environment= would be overridden by the file's same variable, without a word.
    assert values(unit, "Service", "EnvironmentFile") == [SETTINGS_FILE]
    assert values(unit, "Service", "Environment") == []
    for command in values(unit, "Service", "ExecStart"):
        assert command.startswith(f"{INSTALLED_TURNLOG} ")
    # Nothing empties the metrics directory on a start: in a template unit that would wipe the live processes'.
    assert not [v for _, k, v in entries(unit) if k.startswith("ExecStartPre") or "metrics" in v]


@pytest.mark.parametrize("unit", sorted(SERVICES))
def test_the_servers_and_the_worker_are_watched_and_wait_for_the_migration(unit):
    assert values(unit, "Service", "Type") == ["notify"]
    assert values(unit, "Service", "NotifyAccess") == ["main"]
    assert values(unit, "Service", "WatchdogSec") == ["15"]
    assert values(unit, "Service", "Restart") == ["always"]
    assert "turnlog-migrate.service" in words(unit, "Unit", "Requires")
    assert "turnlog-migrate.service" in words(unit, "Unit", "After")


def test_the_daphne_instance_is_its_port_and_the_worker_runs_the_worker():
    assert values("turnlog-daphne@.service", "Service", "ExecStart") == [f"{INSTALLED_TURNLOG} daphne -b 127.0.0.1 -p %i"]
    assert values("turnlog-worker.service", "Service", "ExecStart") == [f"{INSTALLED_TURNLOG} worker"]


def test_the_migration_runs_once_and_stays_done():
    unit = "turnlog-migrate.service"
    assert values(unit, "Service", "Type") == ["oneshot"]
    assert values(unit, "Service", "RemainAfterExit") == ["yes"]
    assert values(unit, "Service", "ExecStart")[0] == f"{INSTALLED_TURNLOG} manage migrate --noinput"
    assert values(unit, "Service", "Restart") == []


@pytest.fixture
def root(tmp_path):
    """A root directory with the units installed as the guide says, the ExecStart path installed (this virtualenv's
    `turnlog`, copied), systemd's own units, and a `turnlog` user and group (the current ids: no privilege needed)."""
    units = tmp_path / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    for unit in UNITS:
        shutil.copy(UNITS_DIR / unit, units / unit)
    if not SYSTEM_UNITS.is_dir():
        pytest.skip(f"{SYSTEM_UNITS} is missing (no systemd installed)")
    shutil.copytree(SYSTEM_UNITS, tmp_path / "usr" / "lib" / "systemd" / "system", symlinks=True)
    installed = tmp_path / INSTALLED_TURNLOG.lstrip("/")
    installed.parent.mkdir(parents=True)
    shutil.copy(TURNLOG, installed)
    (tmp_path / "etc" / "tmpfiles.d").mkdir()
    shutil.copy(UNITS_DIR / "turnlog.conf", tmp_path / "etc" / "tmpfiles.d" / "turnlog.conf")
    (tmp_path / "etc" / "passwd").write_text(f"root:x:0:0::/root:/bin/sh\nturnlog:x:{os.getuid()}:{os.getgid()}::/var/lib/turnlog:/usr/sbin/nologin\n")
    (tmp_path / "etc" / "group").write_text(f"root:x:0:\nturnlog:x:{os.getgid()}:\n")
    return tmp_path


def verify(root: Path) -> subprocess.CompletedProcess:
    command = [needs("systemd-analyze"), "verify", f"--root={root}", *(u.replace("@.", "@8001.") for u in UNITS), "turnlog-daphne@8002.service"]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_systemd_verifies_the_units_together_with_their_commands_installed(root):
    verified = verify(root)
    assert (verified.returncode, verified.stdout + verified.stderr) == (0, "")


def test_systemd_verify_catches_a_missing_command_and_a_wrong_key(root):
    """The verification above would notice: the test is not passing for want of looking."""
    (root / INSTALLED_TURNLOG.lstrip("/")).unlink()
    unit = root / "etc" / "systemd" / "system" / "turnlog-worker.service"
    unit.write_text(unit.read_text().replace("WatchdogSec=", "WatchdogSecs="))
    said = verify(root)
    assert "Unknown key 'WatchdogSecs'" in said.stderr
    assert f"Command {INSTALLED_TURNLOG} is not executable" in said.stderr


def test_the_metrics_directory_is_made_on_the_tmpfs_at_boot_for_turnlog(root):
    created = subprocess.run(
        [needs("systemd-tmpfiles"), "--create", f"--root={root}", "turnlog.conf"], capture_output=True, text=True, timeout=60
    )  # fmt: skip
    assert (created.returncode, created.stderr) == (0, "")
    metrics = root / "run" / "turnlog" / "metrics"
    assert metrics.is_dir()
    assert (metrics.stat().st_mode & 0o777, metrics.stat().st_uid) == (0o750, os.getuid())
    # The directory the guide's settings file names.
    assert "PROMETHEUS_MULTIPROC_DIR=/run/turnlog/metrics" in GUIDE.read_text()


def systemctl_lines(text: str) -> list[str]:
    """The guide's `systemctl ...` commands: lines of its code blocks, and inline code (which may wrap)."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines() if line.strip().startswith("systemctl ")]
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
    return lines + [" ".join(span.split()) for span in re.findall(r"`(systemctl [^`]*)`", prose)]


def units_named(line: str) -> list[str]:
    """The units a `systemctl VERB [OPTIONS] UNIT...` line names, as unit files: `turnlog-daphne@8001` is the template's."""
    words = line.split("#")[0].split()[2:]
    named = []
    for word in words:
        if word.startswith("-") or not word.startswith("turnlog"):
            continue
        name = word if re.search(r"\.(service|target|timer|socket)$", word) else f"{word}.service"
        named.append(re.sub(r"@[^.]+\.", "@.", name))
    return named


def test_every_systemctl_line_of_the_guide_names_units_that_exist():
    lines = systemctl_lines(GUIDE.read_text())
    assert any("enable --now" in line for line in lines)
    named = [unit for line in lines for unit in units_named(line)]
    assert {"turnlog-migrate.service", "turnlog-worker.service", "turnlog-daphne@.service"} <= set(named)
    missing = sorted({unit for unit in named if not (UNITS_DIR / unit).exists()})
    assert missing == [], f"docs/guide/deploy.md names units deploy/systemd/ does not have: {missing}"
    for line in lines:
        verb = line.split()[1]
        assert verb in {"daemon-reload", "enable", "start", "stop", "restart", "status", "reload"}, line
        # nginx's own service: the guide reloads it after installing the site file.
        if verb not in {"daemon-reload"} and line.split("#")[0].split()[2:] != ["nginx"]:
            assert units_named(line), f"a `systemctl {verb}` line that names no Turnlog unit: {line}"
