"""dshloop/settings.py read from a clean environment, in a child process per case (settings are
read once per process): proxy and cookie settings, loud failures, the secret key, no writes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parent.parent
SHOW = ("SECRET_KEY", "CSRF_TRUSTED_ORIGINS", "SECURE_PROXY_SSL_HEADER", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE")
NO_KEY_MESSAGE = "DJANGO_SECRET_KEY must be set when DATABASE_URL is not SQLite"


def import_settings(var_dir: Path, code: str = "", **env: str) -> subprocess.CompletedProcess:
    """Import the settings in a fresh interpreter with only PATH, DSHLOOP_VAR_DIR and `env` set."""
    script = "import json\nimport dshloop.settings as s\n" + (
        code or (f"print(json.dumps({{name: getattr(s, name) for name in {SHOW!r}}}))")
    )
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DSHLOOP_VAR_DIR": str(var_dir), **env}
    return subprocess.run(
        [sys.executable, "-c", script], env=clean, cwd=BASE_DIR, capture_output=True, text=True, timeout=60
    )


def settings_of(var_dir: Path, **env: str) -> dict:
    done = import_settings(var_dir, **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def refused(var_dir: Path, **env: str) -> str:
    """The ImproperlyConfigured line a bad environment stops the import with."""
    done = import_settings(var_dir, **env)
    assert done.returncode != 0, done.stdout
    [line] = [
        line for line in done.stderr.splitlines() if line.startswith("django.core.exceptions.ImproperlyConfigured")
    ]
    return line


@pytest.fixture
def var_dir(tmp_path) -> Path:
    return tmp_path / "var"  # does not exist: a fresh clone


def test_postgresql_without_a_secret_key_refuses_to_start(var_dir):
    message = refused(var_dir, DATABASE_URL="postgresql://dshloop@db.example:5432/dshloop")
    assert NO_KEY_MESSAGE in message and "same key" in message


def test_postgresql_with_a_secret_key_uses_it(var_dir):
    loaded = settings_of(var_dir, DATABASE_URL="postgresql://dshloop@db.example/dshloop", DJANGO_SECRET_KEY="k" * 50)
    assert loaded["SECRET_KEY"] == "k" * 50


def test_the_proxy_ssl_header_is_parsed_into_django_s_tuple(var_dir):
    loaded = settings_of(var_dir, DJANGO_SECURE_PROXY_SSL_HEADER=" HTTP_X_FORWARDED_PROTO = https ")
    assert loaded["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]  # a tuple, through JSON
    assert settings_of(var_dir)["SECURE_PROXY_SSL_HEADER"] is None


def test_csrf_trusted_origins_are_a_comma_list(var_dir):
    loaded = settings_of(
        var_dir, DJANGO_CSRF_TRUSTED_ORIGINS="https://loops.example.com, http://10.0.0.5:8000,,https://*.example.org"
    )
    assert loaded["CSRF_TRUSTED_ORIGINS"] == [
        "https://loops.example.com",
        "http://10.0.0.5:8000",
        "https://*.example.org",
    ]
    assert settings_of(var_dir)["CSRF_TRUSTED_ORIGINS"] == []


def test_secure_cookies_are_off_by_default_and_switched_on_one_by_one(var_dir):
    assert not settings_of(var_dir)["SESSION_COOKIE_SECURE"] and not settings_of(var_dir)["CSRF_COOKIE_SECURE"]
    loaded = settings_of(var_dir, DJANGO_SESSION_COOKIE_SECURE="true", DJANGO_CSRF_COOKIE_SECURE="1")
    assert loaded["SESSION_COOKIE_SECURE"] is True and loaded["CSRF_COOKIE_SECURE"] is True


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("DJANGO_SECURE_PROXY_SSL_HEADER", "X-Forwarded-Proto=https", "must look like HTTP_X_FORWARDED_PROTO=https"),
        ("DJANGO_SECURE_PROXY_SSL_HEADER", "HTTP_X_FORWARDED_PROTO", "must look like HTTP_X_FORWARDED_PROTO=https"),
        ("DJANGO_SECURE_PROXY_SSL_HEADER", "HTTP_X_FORWARDED_PROTO=", "must look like HTTP_X_FORWARDED_PROTO=https"),
        ("DJANGO_SECURE_PROXY_SSL_HEADER", "HTTP_X_FORWARDED_PROTO=https=yes", "must look like"),
        ("DJANGO_CSRF_TRUSTED_ORIGINS", "loops.example.com", "'loops.example.com'"),  # no scheme: never matches
        (
            "DJANGO_CSRF_TRUSTED_ORIGINS",
            "https://ok.example.com,https://loops.example.com/",
            "'https://loops.example.com/'",
        ),
        ("DJANGO_CSRF_TRUSTED_ORIGINS", "https://loops.example.com:99999", "must be a comma-separated list of origins"),
        ("DJANGO_CSRF_TRUSTED_ORIGINS", "ftp://loops.example.com", "must be a comma-separated list of origins"),
        ("DJANGO_SESSION_COOKIE_SECURE", "maybe", "must be a boolean"),
        ("DJANGO_CSRF_COOKIE_SECURE", "https", "must be a boolean"),
    ],
)
def test_bad_values_fail_loudly_naming_the_variable(var_dir, name, value, words):
    message = refused(var_dir, **{name: value})
    assert name in message and words in message


def test_a_failure_webhook_needs_an_http_url_and_a_secret(var_dir):
    url = "https://hooks.example.com/dshloop"
    assert "needs DSHLOOP_FAILURE_WEBHOOK_SECRET" in refused(var_dir, DSHLOOP_FAILURE_WEBHOOK_URL=url)
    message = refused(var_dir, DSHLOOP_FAILURE_WEBHOOK_URL="hooks.example.com", DSHLOOP_FAILURE_WEBHOOK_SECRET="s")
    assert "DSHLOOP_FAILURE_WEBHOOK_URL must be an http:// or https:// URL" in message
    code = "print(s.DSHLOOP_FAILURE_NOTICES, s.DSHLOOP_FAILURE_WEBHOOK_URL or '-')"
    done = import_settings(var_dir, code)
    assert done.stdout.split() == ["True", "-"], done.stderr  # notices on, no webhook by default
    done = import_settings(var_dir, code, DSHLOOP_FAILURE_WEBHOOK_URL=url, DSHLOOP_FAILURE_WEBHOOK_SECRET="s")
    assert done.stdout.split() == ["True", url], done.stderr


def test_fresh_runs_make_no_loops_and_get_no_full_access_by_default(var_dir):
    # contract §15: both are an operator's choice.
    show = "print(json.dumps([s.DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS, s.DSHLOOP_PERMISSION_PRESETS]))"
    done = import_settings(var_dir, show)
    assert json.loads(done.stdout) == [False, ["read-only", "workspace-write"]], done.stderr
    done = import_settings(
        var_dir,
        show,
        DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS="1",
        DSHLOOP_PERMISSION_PRESETS="read-only,workspace-write,danger-full-access",
    )
    assert json.loads(done.stdout) == [True, ["read-only", "workspace-write", "danger-full-access"]], done.stderr
    message = refused(var_dir, DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS="sometimes")
    assert "DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS" in message and "must be a boolean" in message


def test_importing_settings_writes_no_file(tmp_path, var_dir):
    loaded = settings_of(var_dir)
    assert not var_dir.exists()  # neither var/ nor var/static nor var/secret_key
    assert loaded["SECRET_KEY"]  # a key for this process alone until `make run` writes one
    var_dir.mkdir()
    settings_of(var_dir)
    assert list(var_dir.iterdir()) == []


def test_a_missing_static_root_is_no_warning(var_dir):
    """whitenoise warns about a STATIC_ROOT collectstatic has not made yet; -W error makes it fatal."""
    code = (
        "import django, os\nos.environ['DJANGO_SETTINGS_MODULE'] = 'dshloop.settings'\ndjango.setup()\n"
        "from whitenoise.middleware import WhiteNoiseMiddleware\nWhiteNoiseMiddleware(lambda request: None)\n"
        "import warnings\nwarnings.warn('No directory at: /elsewhere/')\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", code],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DSHLOOP_VAR_DIR": str(var_dir)},
    )
    # Only our STATIC_ROOT's warning is silenced: the same warning for another directory still raises.
    assert "UserWarning: No directory at: /elsewhere/" in done.stderr, done.stderr
    assert str(var_dir) not in done.stderr and not var_dir.exists()


@pytest.mark.skipif(
    shutil.which("make") is None or not (BASE_DIR / ".venv/bin/python").exists(),
    reason="needs make and the checkout's .venv (the recipe runs its python)",
)
def test_make_run_writes_the_key_once_and_settings_read_it(var_dir):
    """`make run`'s first step: var/secret_key, made once (sign-ins survive restarts), private."""
    make = ["make", "-s", "-C", str(BASE_DIR), f"{var_dir}/secret_key"]
    env = {**os.environ, "DSHLOOP_VAR_DIR": str(var_dir)}
    subprocess.run(make, env=env, check=True, capture_output=True, timeout=60)
    key = (var_dir / "secret_key").read_text().strip()
    assert len(key) >= 50 and (var_dir / "secret_key").stat().st_mode & 0o077 == 0
    subprocess.run(make, env=env, check=True, capture_output=True, timeout=60)
    assert (var_dir / "secret_key").read_text().strip() == key
    assert settings_of(var_dir)["SECRET_KEY"] == key == settings_of(var_dir)["SECRET_KEY"]


def loaded(var_dir: Path, *names: str, **env: str) -> dict:
    code = f"print(json.dumps({{name: getattr(s, name) for name in {names!r}}}))"
    done = import_settings(var_dir, code, **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_default_permission_preset_must_be_one_of_the_allowed_presets(var_dir):
    message = refused(var_dir, DSHLOOP_DEFAULT_PERMISSION_PRESET="workspace-writ")
    assert message.endswith(
        "DSHLOOP_DEFAULT_PERMISSION_PRESET must be one of DSHLOOP_PERMISSION_PRESETS (read-only, workspace-write), "
        "not 'workspace-writ': choose one of those, or add it to DSHLOOP_PERMISSION_PRESETS."
    ), message
    # The shipped default is checked too: narrowing the list without it is a start-up error.
    assert "DSHLOOP_DEFAULT_PERMISSION_PRESET must be one of DSHLOOP_PERMISSION_PRESETS (workspace-write)" in refused(
        var_dir, DSHLOOP_PERMISSION_PRESETS="workspace-write"
    )
    presets = ("DSHLOOP_PERMISSION_PRESETS", "DSHLOOP_DEFAULT_PERMISSION_PRESET")
    assert loaded(var_dir, *presets, DSHLOOP_PERMISSION_PRESETS="read-only, ro-patched") == {
        "DSHLOOP_PERMISSION_PRESETS": ["read-only", "ro-patched"],
        "DSHLOOP_DEFAULT_PERMISSION_PRESET": "read-only",
    }
    assert (
        loaded(
            var_dir, *presets, DSHLOOP_PERMISSION_PRESETS="ro-patched", DSHLOOP_DEFAULT_PERMISSION_PRESET="ro-patched"
        )["DSHLOOP_DEFAULT_PERMISSION_PRESET"]
        == "ro-patched"
    )


@pytest.mark.parametrize("host", ["dsh", "http"])
def test_on_a_remote_host_the_lease_must_outlast_three_host_timeouts(var_dir, host):
    remote = {"DSHLOOP_HOST": host, "DSHLOOP_HOST_URL": "http://127.0.0.1:9"}
    message = refused(var_dir, **remote, DSHLOOP_RUN_LEASE_SECONDS="30")  # DSHLOOP_HOST_TIMEOUT_SECONDS 10
    assert message.endswith(
        "DSHLOOP_RUN_LEASE_SECONDS must be more than 30 (three host calls of DSHLOOP_HOST_TIMEOUT_SECONDS=10 each, "
        f"a delivery's worst case on DSHLOOP_HOST={host}: a shorter lease would re-drive a delivery still under way), "
        "not 30."
    ), message
    assert "must be more than 60" in refused(var_dir, **remote, DSHLOOP_HOST_TIMEOUT_SECONDS="20")  # the 45 s default
    lease = ("DSHLOOP_RUN_LEASE_SECONDS",)
    assert loaded(var_dir, *lease, **remote) == {"DSHLOOP_RUN_LEASE_SECONDS": 45}
    assert loaded(var_dir, *lease, **remote, DSHLOOP_RUN_LEASE_SECONDS="4", DSHLOOP_HOST_TIMEOUT_SECONDS="1") == {
        "DSHLOOP_RUN_LEASE_SECONDS": 4
    }


def test_the_embedded_host_makes_no_host_calls_so_its_lease_has_no_such_floor(var_dir):
    assert loaded(var_dir, "DSHLOOP_RUN_LEASE_SECONDS", DSHLOOP_RUN_LEASE_SECONDS="3") == {
        "DSHLOOP_RUN_LEASE_SECONDS": 3
    }


def test_a_fresh_runs_extra_tools_are_tool_names(var_dir):
    # contract §14: the operator's widening of the plugin's fresh-run tools (docs/dsh.md).
    show = "print(json.dumps(s.DSHLOOP_FRESH_RUN_TOOLS))"
    assert json.loads(import_settings(var_dir, show).stdout) == []
    done = import_settings(var_dir, show, DSHLOOP_FRESH_RUN_TOOLS="todo_write, mcp__docs__search")
    assert json.loads(done.stdout) == ["todo_write", "mcp__docs__search"], done.stderr
    message = refused(var_dir, DSHLOOP_FRESH_RUN_TOOLS="todo_write;subagent")
    assert "DSHLOOP_FRESH_RUN_TOOLS must list tool names" in message and "'todo_write;subagent'" in message
