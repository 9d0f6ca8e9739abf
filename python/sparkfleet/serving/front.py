"""The gateway's front door: nginx checks each key and the path it may open, then calls smg.

smg passes the client's own `Authorization` to the lanes (see `serving.users`), so per-user keys
cannot live in smg while the lanes take only the gateway's key. nginx (Debian `nginx-light`,
NixOS `pkgs.nginx`) sits in front on the public port. Three keys, three reaches:
- a user's key, and the operator's gateway key, open the inference API only (`INFERENCE_PATHS`,
  each with its methods): `map $http_authorization` holds one case-sensitive regex per key
  (`^Bearer\\s+KEY$`); anything else gets 401 before smg is reached. nginx replaces the client's
  header with `Authorization: Bearer <gateway key>`, so smg and the lanes only ever see the
  gateway's key, and sets `x-smg-tenant-id` to the user's name (smg `--trust-tenant-header`),
  replacing any the client sent.
- every other path is smg's admin API (workers, tokenizers, caches, plugins): the operator's admin
  key only, passed to smg as sent. smg holds that key as its control-plane key
  (`--control-plane-api-keys`), which replaces its `--api-key` on those routes: the gateway key
  that nginx attaches to every user request does not open them at smg either.
- nobody adds or replaces a worker through the front (`POST /workers`, `PUT /workers/{id}`): smg
  sends the gateway's key to every worker it holds, so the workers are the inventory's, given at
  start (`--worker-urls`).
The keys are in `users.conf` (0600) beside the main config; none is in an argv. A change (`keys add`
/ `keys revoke`) rewrites it and sends the running nginx SIGHUP (nginx(8): "reload configuration"),
so a revoked key is refused without restarting smg. Streams pass through unbuffered
(proxy_buffering off), with the gateway's own long timeouts.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..base.atomic import ensure_dir, write_bytes
from ..base.errors import SparkfleetError
from . import users

NGINX_ENV = "SPARKFLEET_NGINX"
TENANT_HEADER = "x-smg-tenant-id"  # smg's default --tenant-header-name
# What an OpenAI client calls (path -> methods): the only paths a user's key opens. Not all of /v1
# is inference: smg's /v1/tokenizers registers a tokenizer (an admin act), its /v1/responses and
# /v1/conversations store state and reach MCP servers a request names.
INFERENCE_PATHS = {
    "/v1/chat/completions": "POST",
    "/v1/completions": "POST",
    "/v1/embeddings": "POST",
    "/v1/models": "GET|HEAD",
}


@dataclass(frozen=True)
class FrontPaths:
    root: Path  # <gateway state>/front: nginx's prefix (-p), temp dirs, logs, pid

    @property
    def conf(self) -> Path:
        return self.root / "nginx.conf"

    @property
    def users_conf(self) -> Path:
        return self.root / "users.conf"

    @property
    def pid(self) -> Path:
        return self.root / "nginx.pid"

    @property
    def error_log(self) -> Path:
        return self.root / "error.log"

    @property
    def access_log(self) -> Path:
        return self.root / "access.log"


def paths(state_dir: Path) -> FrontPaths:
    return FrontPaths(Path(state_dir) / "front")


def nginx_binary() -> str:
    """$SPARKFLEET_NGINX, else nginx on PATH or in /usr/sbin (Debian puts it there)."""
    found = os.environ.get(NGINX_ENV) or shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if not found:
        raise SparkfleetError(
            "nginx is not installed: the gateway's front checks the per-user keys with it",
            hint="apt-get install nginx-light (DGX OS), or set SPARKFLEET_NGINX; NixOS: modules/gateway.nix",
        )
    return found


def check_bind(bind: str) -> str:
    """The address the front listens on: an IP address (it is written into nginx.conf)."""
    try:
        ipaddress.ip_address(bind)
    except ValueError:
        raise SparkfleetError(
            f"--bind {bind!r}: the gateway listens on an IP address",
            hint="e.g. --bind 0.0.0.0 (every address, the default) or --bind 127.0.0.1",
        ) from None
    return bind


def _listen(bind: str, port: int) -> str:
    check_bind(bind)
    return f"[{bind}]:{port}" if ":" in bind else f"{bind}:{port}"


def users_conf_text(gateway_key: str, admin_key: str, user_keys: dict[str, str]) -> str:
    """The secret part: who may pass where, and the key the front calls smg with."""
    users.check_key_chars(gateway_key, "the gateway's key")
    lines = ["map $http_authorization $sparkfleet_user {", '    default "";']
    for name, key in [(users.OPERATOR, gateway_key), *sorted(user_keys.items())]:
        lines.append(f'    "~^Bearer\\s+{users.check_key_chars(key, f"user {name}")}$" "{name}";')
    admin = users.check_key_chars(admin_key, "the admin key")
    lines += ["}", "map $http_authorization $sparkfleet_admin {", '    default "";',
              f'    "~^Bearer\\s+{admin}$" "{users.ADMIN}";', "}",
              f'map "" $sparkfleet_upstream_auth {{ default "Bearer {gateway_key}"; }}', ""]  # fmt: skip
    return "\n".join(lines)


def _error(status: int, message: str, code: str) -> str:
    """`return STATUS '<OpenAI-style JSON error>';`: inside nginx's single quotes, where a quote would
    end the string and a `$` would be read as a variable, so the messages hold neither."""
    assert not set("'$\\") & set(message), message
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    return f"return {status} '{json.dumps({'error': error})}';"


# what every location sets (a location that sets one proxy_set_header inherits none from above)
PROXYING = "".join(f"\n            {line};" for line in (
    "proxy_http_version 1.1", 'proxy_set_header Connection ""', "proxy_buffering off",
    "proxy_request_buffering off", "proxy_read_timeout 3600s", "proxy_send_timeout 3600s",
))  # fmt: skip
UNAUTHORIZED = "\n                ".join((
    "add_header WWW-Authenticate 'Bearer realm=\"sparkfleet\"' always;",
    _error(401, "Invalid or missing API key: send Authorization: Bearer <your key>", "invalid_api_key"),
))  # fmt: skip


def _inference_location(path: str, methods: str, router_port: int) -> str:
    """A user's (or the operator's inference) key; smg is called with the gateway's key, for exactly
    this path: proxy_pass with a URI replaces the normalized path, so smg never reads a spelling
    (`..`, `%2F`, `//`) that nginx resolved to this path but smg would route elsewhere."""
    allowed = methods.replace("|", ", ")
    return f"""
        location = {path} {{
            if ($sparkfleet_user = "") {{
                {UNAUTHORIZED}
            }}
            if ($request_method !~ ^({methods})$) {{
                {_error(405, f"{path} takes {allowed}", "method_not_allowed")}
            }}
            proxy_pass http://127.0.0.1:{router_port}{path};
            proxy_set_header Authorization $sparkfleet_upstream_auth;
            proxy_set_header {TENANT_HEADER} $sparkfleet_user;{PROXYING}
        }}"""


def _admin_location(match: str, refuse_methods: str, router_port: int) -> str:
    """The admin key only; the request goes to smg as sent, with the admin key it carries.
    `refuse_methods`: refused even so (a worker's URL comes from the inventory, never a request)."""
    refuse = ""
    if refuse_methods:
        refuse = f"""
            if ($request_method ~ ^({refuse_methods})$) {{
                {_error(403, WORKERS_FROM_INVENTORY, "workers_from_inventory")}
            }}"""
    return f"""
        location {match} {{
            if ($sparkfleet_admin_refusal = 401) {{
                {UNAUTHORIZED}
            }}
            if ($sparkfleet_admin_refusal = 403) {{
                {_error(403, NOT_INFERENCE, "not_an_inference_path")}
            }}{refuse}
            proxy_pass http://127.0.0.1:{router_port};
            proxy_set_header {TENANT_HEADER} "";{PROXYING}
        }}"""


WORKERS_FROM_INVENTORY = (
    "workers come from the inventory, never from a request: add a [gateway] table to the recipe "
    "of the lane, then sparkfleet gateway down and sparkfleet gateway up"
)
NOT_INFERENCE = "this key opens the inference API only: " + ", ".join(INFERENCE_PATHS)



def conf_text(bind: str, port: int, router_port: int) -> str:
    """nginx.conf: no secret in it (they are in users.conf, included), and no path of the state dir:
    every file is named relative to the prefix (`-p`, the front's directory), so a state dir with a
    space, a quote or a `$` in its name never enters the config's syntax."""
    inference = "".join(_inference_location(p, m, router_port) for p, m in INFERENCE_PATHS.items())
    admin_paths = (("/", ""), ("= /workers", "POST"), ("^~ /workers/", "PUT"))  # (match, refused methods)
    admin = "".join(_admin_location(match, refuse, router_port) for match, refuse in admin_paths)
    return f"""# written by `sparkfleet gateway up`: the front of smg (sparkfleet/serving/front.py)
daemon off;
worker_processes 2;
pid nginx.pid;
error_log error.log warn;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path tmp/body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
    include users.conf;
    # an admin path: the admin key passes; a known inference key gets 403, any other 401
    map "$sparkfleet_admin:$sparkfleet_user" $sparkfleet_admin_refusal {{
        "~^{users.ADMIN}:" "";
        ":" "401";
        default "403";
    }}
    # who asked, never their key
    log_format sparkfleet '$time_iso8601 $remote_addr $sparkfleet_user$sparkfleet_admin "$request" '
                          '$status $upstream_http_x_smg_routed_worker_id $request_time';
    access_log access.log sparkfleet;
    server_tokens off;
    client_max_body_size 64m;
    server {{
        listen {_listen(bind, port)};
        default_type application/json;
        # the inference API (what an OpenAI client calls): every user's key and the operator's{inference}
        # everything else is smg's admin API: the operator's admin key only{admin}
    }}
}}
"""


def write(
    state_dir: Path, gateway_key: str, admin_key: str, bind: str, port: int, router_port: int
) -> FrontPaths:
    """Both config files (0600, in a 0700 directory); returns their paths."""
    p = paths(state_dir)
    text = conf_text(bind, port, router_port)  # checks bind before anything is written
    ensure_dir(p.root / "tmp", 0o700)
    write_users(state_dir, gateway_key, admin_key)
    write_bytes(p.conf, text.encode(), mode=0o600)
    return p


def write_users(state_dir: Path, gateway_key: str, admin_key: str) -> dict[str, str]:
    """Rewrite users.conf from the user key files that can be trusted; returns the users whose file
    was left out, and why (they are refused until it is fixed, and never block the others)."""
    p = paths(state_dir)
    ensure_dir(p.root, 0o700)
    os.chmod(p.root, 0o700)  # a directory of key-bearing files, whatever made it first
    files = users.key_files(state_dir)
    write_bytes(p.users_conf, users_conf_text(gateway_key, admin_key, files.admitted).encode(), mode=0o600)
    return files.refused


def argv(p: FrontPaths, nginx: str) -> list[str]:
    """nginx's command line: paths only."""
    return [nginx, "-p", str(p.root), "-c", str(p.conf)]
