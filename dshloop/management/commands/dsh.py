"""`dshloop dsh install`: dshloop's plugin into a person's own DeepSeek Harness, the DSH way.

It runs DSH's own `dsh plugin --profile <profile> add <plugin>` on the plugin this dshloop ships
(inside the installed package, or a clone's dsh-plugin/), so the profile gets exactly the bundle
that matches this dshloop, already built: no Node build on the person's machine. DSH links the
folder, so upgrading dshloop upgrades the plugin at DSH's next start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

PACKAGE_DIR = Path(__file__).resolve().parents[2]  # dshloop/
# A wheel carries the plugin inside the package (setup.py); a clone has it beside the package.
SHIPPED_PLUGIN_DIRS = (PACKAGE_DIR / "dsh-plugin", PACKAGE_DIR.parent / "dsh-plugin")
# scripts/install-dsh.sh's layout (DSHLOOP_DSH_DIR): DSH's own Node 22 and pnpm, and DSH's entry point.
INSTALL_NODE_BIN = Path("tools/node_modules/.bin")
INSTALL_BIN_JS = Path("app/node_modules/@deepseek-ai/dsh/lib/bin.js")


def shipped_plugin_dir() -> Path:
    """The plugin folder `dsh plugin add` takes: a package.json and the committed bundles."""
    for folder in SHIPPED_PLUGIN_DIRS:
        if (folder / "package.json").is_file() and (folder / "lib" / "index.js").is_file():
            return folder
    raise CommandError(
        "this dshloop has no built DSH plugin (looked in "
        + ", ".join(str(folder) for folder in SHIPPED_PLUGIN_DIRS)
        + "): reinstall dshloop from a wheel or a clone"
    )


def dsh_command(dsh: str | None) -> tuple[list[str], dict[str, str]]:
    """How to run `dsh`, and what its environment needs: `--dsh` (the command, its bin.js, or an
    install directory), else DSHLOOP_DSH_DIR's install, else `dsh` on PATH."""
    env = dict(os.environ)
    where = dsh or os.environ.get("DSHLOOP_DSH_DIR", "")
    if where:
        path = Path(where).expanduser().resolve()
        if path.is_dir():
            node, bin_js = path / INSTALL_NODE_BIN / "node", path / INSTALL_BIN_JS
            if not (node.exists() and bin_js.is_file()):
                raise CommandError(f"{path} is not a DSH install (no {INSTALL_BIN_JS} with Node in {INSTALL_NODE_BIN})")
            # DSH's `plugin add` runs pnpm, which that install keeps beside its Node.
            env["PATH"] = f"{path / INSTALL_NODE_BIN}{os.pathsep}{env.get('PATH', '')}"
            return [str(node), str(bin_js)], env
        if path.suffix == ".js" and path.is_file():
            return ["node", str(path)], env
        if path.is_file() and os.access(path, os.X_OK):
            return [str(path)], env
        raise CommandError(f"--dsh {where}: neither the dsh command, its bin.js, nor a DSH install directory")
    found = shutil.which("dsh")
    if found is None:
        raise CommandError(
            "no `dsh` on PATH: pass --dsh (the dsh command, or the directory scripts/install-dsh.sh made) "
            "or set DSHLOOP_DSH_DIR"
        )
    return [found], env


class Command(BaseCommand):
    help = "DeepSeek Harness: `install` adds dshloop's plugin to a DSH profile with DSH's own `dsh plugin add`."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        install = actions.add_parser("install", help="add this dshloop's DSH plugin to a DSH profile")
        install.add_argument("--profile", default="web", help="the DSH profile (default web, DSH Web's)")
        install.add_argument("--dsh-home", help="DSH's home (DSH_HOME; default DSH's own, ~/.dsh)")
        install.add_argument(
            "--dsh", help="the dsh command, its bin.js, or a DSH install directory (default: DSHLOOP_DSH_DIR, PATH)"
        )

    def handle(self, *args, action, profile, dsh_home=None, dsh=None, **options):
        plugin = shipped_plugin_dir()
        command, env = dsh_command(dsh)
        if dsh_home:
            home = Path(dsh_home).expanduser().resolve()
            home.mkdir(parents=True, exist_ok=True)
            env["DSH_HOME"] = str(home)
        done = subprocess.run([*command, "plugin", "--profile", profile, "add", str(plugin)], env=env, check=False)
        if done.returncode != 0:
            raise CommandError(f"`dsh plugin --profile {profile} add {plugin}` failed (exit {done.returncode})")
        version = json.loads((plugin / "package.json").read_text())["version"]
        where = f" in {env['DSH_HOME']}" if "DSH_HOME" in env else ""
        self.stdout.write(
            f"dshloop's DSH plugin {version} is in DSH profile {profile!r}{where}. Restart DSH to load it: "
            "its agents get the loop tools, DSH Web the Loops panel."
        )
