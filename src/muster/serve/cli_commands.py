"""``muster serve run|deploy|config|status|shutdown|build``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from typing import Any


def register(sub: Any) -> None:
    """Add the ``serve`` command group to the ``muster`` parser."""
    p = sub.add_parser("serve", help="run and manage Serve applications")
    ss = p.add_subparsers(dest="serve_command", required=True)
    run = ss.add_parser("run", help="serve module:app (or a config file) until Ctrl-C")
    run.add_argument("target", help="'module:app' or a config .yaml")
    run.add_argument("arguments", nargs="*", metavar="key=value",
                     help="arguments for an application builder function (module:builder key=value ...), as Ray's")
    run.add_argument("--host", default=None, help="interface to listen on (default 127.0.0.1)")
    run.add_argument("--port", type=int, default=None, help="port (default 8000; 0 picks a free one)")
    run.add_argument("--name", default="default", help="application name (module:app only)")
    run.add_argument("--route-prefix", default="/", help="route prefix (module:app only)")
    run.add_argument("--runtime-env", default=None, metavar="FILE",
                     help="a YAML file with a runtime_env: its env_vars reach every worker (Ray's option)")
    run.add_argument("--runtime-env-json", default=None, metavar="JSON", help="the same, as a JSON string")
    run.add_argument("--working-dir", default=None,
                     help="Ray's option: a local folder is put first on the import path; a remote URI is refused")
    run.add_argument("-d", "--app-dir", default=".", help="the folder to import the module from (default: .)")
    run.add_argument("-r", "--reload", action="store_true",
                     help="redeploy module:app when a .py file under --app-dir (or --working-dir) changes, as Ray's")
    run.add_argument("--blocking", dest="blocking", action="store_true", default=True,
                     help="serve in this process until Ctrl-C (the default)")
    run.add_argument("--non-blocking", dest="blocking", action="store_false",
                     help="return once the apps run, leaving them served by a background process "
                          "(stop it with `muster serve shutdown`), as Ray's `serve run --non-blocking`")
    run.set_defaults(fn=cmd_run, interspersed="arguments")  # key=value may follow options, as in Ray's CLI
    dep = ss.add_parser("deploy", help="deploy a config file's apps onto the running Serve instance")
    dep.add_argument("config")
    dep.add_argument("--port", type=int, default=None, help="which instance, by its HTTP port")
    dep.set_defaults(fn=cmd_deploy)
    cf = ss.add_parser("config", help="the config each app was deployed with, as YAML (Ray's `serve config`)")
    cf.add_argument("--port", type=int, default=None)
    cf.add_argument("-n", "--name", default=None, help="only this app")
    cf.set_defaults(fn=cmd_config)
    st = ss.add_parser("status", help="apps and deployments of a running Serve instance, as YAML (as Ray's)")
    st.add_argument("--port", type=int, default=None)
    st.add_argument("-n", "--name", default=None, help="only this app (Ray's option)")
    st.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    st.set_defaults(fn=cmd_status)
    sh = ss.add_parser("shutdown", help="drain and stop a running Serve instance")
    sh.add_argument("--port", type=int, default=None)
    sh.add_argument("-y", "--yes", action="store_true", help="accepted for Ray's scripts (muster does not ask)")
    sh.set_defaults(fn=cmd_shutdown)
    build = ss.add_parser("build", help="write a config file for module:app targets (Ray's `serve build`)")
    build.add_argument("import_paths", nargs="+", metavar="module:app")
    build.add_argument("-o", "--output-path", default=None, help="the file to write (default: print it)")
    build.add_argument("-d", "--app-dir", default=".", help="the folder to import the modules from (default: .)")
    build.add_argument("-k", "--kubernetes-format", action="store_true",
                       help="Ray's KubeRay layout: refused, muster's clusters are Ray's own (see docs/multinode.md)")
    build.set_defaults(fn=cmd_build)
    # Ray's scripts pass its dashboard address; muster finds local instances by --port
    for cmd in (run, dep, cf, st, sh):
        cmd.add_argument("-a", "--address", default=None,
                         help="Ray's dashboard address: ignored "
                              "(muster finds the instance on this machine; --port picks one)")


def _deploy_config(config: Any, http_options: dict[str, Any]) -> None:
    from muster.serve import schema

    schema.deploy(config, http_options)


def cmd_run(args: argparse.Namespace) -> int:
    from muster.serve import api, schema
    from muster.serve._internal import admin

    import muster

    try:
        runtime_env = _runtime_env(args)
        if args.reload and (not args.blocking or args.target.endswith((".yaml", ".yml", ".json"))):
            from muster.exceptions import InvalidArgumentError

            raise InvalidArgumentError("--reload watches a module:app target and blocks: drop --non-blocking or "
                                       "run the module instead of a config file (as in Ray).")
        if not args.blocking:  # the background process reads the options again
            return _run_in_background(args)
        sys.path.insert(0, os.path.abspath(args.app_dir))
        if args.target.endswith((".yaml", ".yml", ".json")):
            if args.arguments:
                from muster.exceptions import InvalidArgumentError

                raise InvalidArgumentError(f"{' '.join(args.arguments)}: key=value arguments go with module:builder; "
                                           "a config file gives an app's args under applications[].args.")
            config = schema.load_config(args.target)
            http = dict(config.http_options)
            apps: Any = config
        else:
            http, apps = {}, schema.import_app(args.target, _key_values(args.arguments))
        if runtime_env and not muster.is_initialized():  # as Ray's: the job's default for every worker
            muster.init(runtime_env=runtime_env)
    except (ImportError, TypeError, ValueError, OSError) as exc:
        print(f"muster serve run: {exc}", file=sys.stderr)
        return 2
    if args.host is not None:
        http["host"] = args.host
    if args.port is not None:
        http["port"] = args.port
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        # Serve starts with the first deploy: its ingress on the server the apps need (uvicorn for WebSockets)
        if isinstance(apps, schema.ServeConfig):
            _deploy_config(apps, http)
        else:
            api._run(apps, name=args.name, route_prefix=args.route_prefix, http_options=http)
        st = api.status()
        print(f"Serving {', '.join(st.applications)} at http://{st.http['host']}:{st.http['port']} "
              "(Ctrl-C drains and stops)", flush=True)
        if args.reload:
            _reload_on_change(args, lambda: stop.is_set() or admin.shutdown_requested.is_set())
        while not stop.wait(0.2) and not admin.shutdown_requested.is_set():
            pass
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # noqa: BLE001 - a CLI: say what failed, exit non-zero
        print(f"muster serve run: {type(exc).__name__}: {exc}", file=sys.stderr)
        api.shutdown()
        return 1
    print("Draining and stopping...", flush=True)
    api.shutdown()
    return 0


def _reload_on_change(args: argparse.Namespace, stopped: Any) -> None:
    """Until ``stopped()``: when a ``.py`` file under the watched folder changes, import the app again and
    redeploy it (Ray's ``serve run --reload``); a failed redeploy is reported and the running app kept."""
    import traceback

    import watchfiles

    from muster.serve import api, schema

    folder = os.path.abspath(args.working_dir or args.app_dir)
    for changes in watchfiles.watch(folder, rust_timeout=200, yield_on_timeout=True,
                                    watch_filter=watchfiles.PythonFilter()):
        if stopped():
            return
        if not changes:
            continue
        try:
            app = schema.import_app(args.target, _key_values(args.arguments), reload=True)
            api._run(app, name=args.name, route_prefix=args.route_prefix, new_code=True)
            print(f"Redeployed {args.name} ({len(changes)} file(s) changed under {folder})", flush=True)
        except Exception:  # noqa: BLE001 - keep serving the last good version, as Ray's --reload does
            traceback.print_exc()
            print(f"muster serve run --reload: redeploying {args.name} failed; the running version stays.",
                  file=sys.stderr, flush=True)


def _runtime_env(args: argparse.Namespace) -> dict[str, Any]:
    """The runtime_env of Ray's ``serve run --runtime-env FILE | --runtime-env-json JSON [--working-dir DIR]``;
    a local working_dir goes first on the import path here (muster's workers share this machine's files)."""
    import yaml

    from muster.exceptions import InvalidArgumentError

    if args.runtime_env and args.runtime_env_json:
        raise InvalidArgumentError("--runtime-env and --runtime-env-json: pass only one of them (as in Ray).")
    try:
        if args.runtime_env:
            with open(args.runtime_env) as f:
                env = yaml.safe_load(f) or {}
        else:
            env = json.loads(args.runtime_env_json) if args.runtime_env_json else {}
    except yaml.YAMLError as exc:
        raise InvalidArgumentError(f"--runtime-env {args.runtime_env}: not valid YAML ({exc}).") from None
    if not isinstance(env, dict):
        raise InvalidArgumentError(f"runtime_env {env!r}: use a mapping such as {{'env_vars': {{'K': 'v'}}}}.")
    working_dir = args.working_dir or env.pop("working_dir", None)
    env.pop("working_dir", None)
    if working_dir is not None:
        if "://" in str(working_dir):
            raise InvalidArgumentError(f"working_dir {working_dir!r}: muster takes a local folder only (it "
                                       "downloads nothing); unpack it here and pass its path.")
        sys.path.insert(0, os.path.abspath(working_dir))
    return env


def _run_in_background(args: argparse.Namespace) -> int:
    """``serve run --non-blocking``: start a blocking ``muster serve run`` in its own session, its output in a log
    file beside the instance records, and return once it says it serves (or report its log if it exits first)."""
    import time

    from muster.core import background, settings

    running = _instance(args.port, quiet=True)
    if running is not None:  # Ray's Serve is one per cluster: a second `serve run` adds its app to it
        return _run_on(running, args)
    argv = [args.target, *args.arguments, "--name", args.name, "--route-prefix", args.route_prefix,
            "--app-dir", os.path.abspath(args.app_dir)]
    for flag, value in (("--host", args.host), ("--port", args.port), ("--runtime-env-json", args.runtime_env_json),
                        ("--working-dir", args.working_dir and os.path.abspath(args.working_dir)),
                        ("--runtime-env", args.runtime_env and os.path.abspath(args.runtime_env))):
        if value is not None:
            argv += [flag, str(value)]
    state = settings.serve_state_dir()
    os.makedirs(state, exist_ok=True)
    log_path = os.path.join(state, f"run-{os.getpid()}-{time.time_ns()}.log")
    child = background.start_cli(["serve", "run", *argv], log_path)
    while True:
        with open(log_path, errors="replace") as f:
            text = f.read()
        serving = next((line for line in text.splitlines() if line.startswith("Serving ")), None)
        if serving is not None:
            print(serving.replace("(Ctrl-C drains and stops)", ""), flush=True)
            print(f"serving in the background (pid {child.pid}, output in {log_path}); "
                  "stop it with `muster serve shutdown`.", flush=True)
            return 0
        if child.poll() is not None:
            print(text, end="", file=sys.stderr)
            print(f"muster serve run --non-blocking: the background serve process exited with {child.returncode} "
                  f"before serving (its output is above and in {log_path}).", file=sys.stderr)
            return child.returncode or 1
        time.sleep(0.2)


def _key_values(pairs: list[str]) -> dict[str, str]:
    """``key=value`` words as a dict (the values stay strings, as Ray passes them)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            from muster.exceptions import InvalidArgumentError

            raise InvalidArgumentError(f"argument {pair!r}: pass a builder's arguments as key=value.")
        out[key] = value
    return out


def _run_on(rec: dict[str, Any], args: argparse.Namespace) -> int:
    """``serve run --non-blocking`` when a Serve instance already runs: deploy the config file, or add the app
    (replacing one of its name), there."""
    from muster.serve._internal import admin

    if args.target.endswith((".yaml", ".yml", ".json")):
        reply = admin.request(rec, "deploy", path=os.path.abspath(args.target), timeout_s=600)
    else:
        env_vars = (_runtime_env(args).get("env_vars") or {})
        reply = admin.request(rec, "run", import_path=args.target, args=_key_values(args.arguments), name=args.name,
                              route_prefix=args.route_prefix, app_dir=os.path.abspath(args.app_dir),
                              env_vars=env_vars, timeout_s=600)
    if "error" in reply:
        print(f"muster serve run: the Serve instance {_where(rec)}: {reply['error']}", file=sys.stderr)
        return 1
    print(f"Serving {', '.join(reply['applications'])} {_url(rec)} "
          f"(added to the running Serve instance, pid {rec['pid']}; stop it with `muster serve shutdown`).")
    return 0


def _where(rec: dict[str, Any]) -> str:
    """Which instance a record names: by its port, or by its pid alone when it runs no HTTP proxy."""
    return f"on port {rec['port']} (pid {rec['pid']})" if rec["port"] is not None else \
        f"with no HTTP proxy (pid {rec['pid']})"


def _url(rec: dict[str, Any]) -> str:
    return f"at http://{rec['host']}:{rec['port']}" if rec["port"] is not None else "with no HTTP proxy"


def _instance(port: int | None, quiet: bool = False) -> dict[str, Any] | None:
    from muster.serve._internal import admin

    found = [r for r in admin.instances() if port is None or r["port"] == port]
    if not found:
        if quiet:
            return None
        where = f" on port {port}" if port is not None else ""
        print(f"no running Serve instance{where} (start one with `muster serve run module:app`).", file=sys.stderr)
        return None
    return found[0]


def cmd_deploy(args: argparse.Namespace) -> int:
    from muster.serve import schema
    from muster.serve._internal import admin

    try:
        schema.load_config(args.config)  # validate here, before the server sees it
    except (ValueError, OSError) as exc:
        print(f"muster serve deploy: {exc}", file=sys.stderr)
        return 2
    rec = _instance(args.port)
    if rec is None:
        return 1

    reply = admin.request(rec, "deploy", timeout_s=600, path=os.path.abspath(args.config))
    if "error" in reply:
        print(f"muster serve deploy: {reply['error']}", file=sys.stderr)
        return 1
    print(f"deployed {', '.join(reply['applications'])} {_url(rec)}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """Print the config file entry each running app was deployed from (``muster serve deploy`` or ``serve run
    config.yaml``), one YAML document per app, as Ray's ``serve config``; apps ``serve.run`` started have none."""
    import yaml

    from muster.serve._internal import admin

    rec = _instance(args.port)
    if rec is None:
        return 1
    configs = admin.request(rec, "config").get("applications", {})
    if args.name is not None:
        if configs.get(args.name) is None:
            print(f'No config has been deployed for application "{args.name}".')
            return 0
        configs = {args.name: configs[args.name]}
    docs = [yaml.safe_dump(c, sort_keys=False, default_flow_style=False) for c in configs.values() if c is not None]
    print("\n---\n\n".join(docs), end="") if docs else print("No configuration was found.")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from muster.serve._internal import admin

    rec = _instance(args.port)
    if rec is None:
        return 1
    status = admin.request(rec, "status")
    if args.name is not None:
        apps = status.get("applications", {})
        if args.name not in apps:
            print(f"no Serve app named {args.name!r} runs in the Serve instance {_where(rec)}; its apps: "
                  f"{sorted(apps) or 'none'}", file=sys.stderr)
            return 1
        status = {**status, "applications": {args.name: apps[args.name]}}
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        import yaml

        print(yaml.safe_dump(status, sort_keys=False, default_flow_style=False), end="")
    return 0


def cmd_shutdown(args: argparse.Namespace) -> int:
    from muster.serve._internal import admin

    rec = _instance(args.port)
    if rec is None:
        return 1
    admin.request(rec, "shutdown")
    print(f"asked the Serve instance {_where(rec)} to drain and stop")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    """Print (or write) a config file that ``muster serve run|deploy`` takes, as Ray's ``serve build`` does:
    one application per import path, each deployment with the options its code sets (defaults left out)."""
    import yaml

    from muster.serve import schema

    if args.kubernetes_format:
        print("muster serve build: --kubernetes-format writes KubeRay's layout, which muster does not use; drop it "
              "and deploy the plain config with `muster serve deploy`.", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.abspath(args.app_dir))
    try:
        config = schema.build_config(args.import_paths)
    except (ImportError, ValueError, TypeError) as exc:
        print(f"muster serve build: {exc}", file=sys.stderr)
        return 2
    text = "# made by `muster serve build`: edit it, then `muster serve deploy` or `muster serve run` it\n"
    text += yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    if args.output_path is None:
        print(text, end="")
    else:
        with open(args.output_path, "w") as f:
            f.write(text)
        print(f"wrote {args.output_path}")
    return 0
