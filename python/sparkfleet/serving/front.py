"""The gateway's front door: nginx checks each user's key, then calls smg with the gateway's key.

smg passes the client's own `Authorization` to the lanes (see `serving.users`), so per-user keys
cannot live in smg while the lanes take only the gateway's key. nginx (Debian `nginx-light`,
NixOS `pkgs.nginx`) sits in front on the public port:
- `map $http_authorization` holds one case-sensitive regex per key (`^Bearer\\s+KEY$`): the
  operator's (the gateway key) and each user's. Anything else gets 401, before smg is reached.
- `proxy_set_header Authorization "Bearer <gateway key>"` replaces the client's header, so smg
  and the lanes only ever see the gateway's key; `x-smg-tenant-id` is set to the user's name
  (smg `--trust-tenant-header`), replacing any the client sent.
- The keys are in `users.conf` (0600) beside the main config; neither is in an argv. A change
  (`keys add` / `keys revoke`) rewrites it and sends the running nginx SIGHUP (nginx(8): "reload
  configuration"), so a revoked key is refused without restarting smg.
- Streams pass through unbuffered (proxy_buffering off), with the gateway's own long timeouts.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..atomic import ensure_dir, write_bytes
from ..errors import SparkfleetError
from . import users

NGINX_ENV = "SPARKFLEET_NGINX"
TENANT_HEADER = "x-smg-tenant-id"  # smg's default --tenant-header-name


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


def _listen(bind: str, port: int) -> str:
    return f"[{bind}]:{port}" if ":" in bind else f"{bind}:{port}"


def users_conf_text(gateway_key: str, user_keys: dict[str, str]) -> str:
    """The secret part: who may pass, and the key the front calls smg with."""
    users.check_key_chars(gateway_key, "the gateway's key")
    lines = ["map $http_authorization $sparkfleet_user {", '    default "";']
    for name, key in [(users.OPERATOR, gateway_key), *sorted(user_keys.items())]:
        lines.append(f'    "~^Bearer\\s+{users.check_key_chars(key, f"user {name}")}$" "{name}";')
    lines += ["}", f'map "" $sparkfleet_upstream_auth {{ default "Bearer {gateway_key}"; }}', ""]
    return "\n".join(lines)


def conf_text(p: FrontPaths, bind: str, port: int, router_port: int) -> str:
    """nginx.conf: no secret in it (they are in users.conf, included)."""
    tmp = p.root / "tmp"
    unauthorized = (
        '{"error":{"message":"Invalid or missing API key: send Authorization: Bearer <your key>",'
        '"type":"invalid_request_error","param":null,"code":"invalid_api_key"}}'
    )
    return f"""# written by `sparkfleet gateway up`: the front of smg (sparkfleet/serving/front.py)
daemon off;
worker_processes 2;
pid {p.pid};
error_log {p.error_log} warn;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {p.users_conf};
    # who asked, never their key
    log_format sparkfleet '$time_iso8601 $remote_addr $sparkfleet_user "$request" $status '
                          '$upstream_http_x_smg_routed_worker_id $request_time';
    access_log {p.access_log} sparkfleet;
    server_tokens off;
    client_max_body_size 64m;
    server {{
        listen {_listen(bind, port)};
        default_type application/json;
        location / {{
            if ($sparkfleet_user = "") {{
                add_header WWW-Authenticate 'Bearer realm="sparkfleet"' always;
                return 401 '{unauthorized}';
            }}
            proxy_pass http://127.0.0.1:{router_port};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Authorization $sparkfleet_upstream_auth;
            proxy_set_header {TENANT_HEADER} $sparkfleet_user;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
        }}
    }}
}}
"""


def write(state_dir: Path, gateway_key: str, bind: str, port: int, router_port: int) -> FrontPaths:
    """Both config files (0600, in a 0700 directory); returns their paths."""
    p = paths(state_dir)
    ensure_dir(p.root / "tmp", 0o700)
    write_users(state_dir, gateway_key)
    write_bytes(p.conf, conf_text(p, bind, port, router_port).encode(), mode=0o600)
    return p


def write_users(state_dir: Path, gateway_key: str) -> bool:
    """Rewrite users.conf from the user key files; True if it changed."""
    p = paths(state_dir)
    ensure_dir(p.root, 0o700)
    os.chmod(p.root, 0o700)  # a directory of key-bearing files, whatever made it first
    text = users_conf_text(gateway_key, users.keys(state_dir))
    return write_bytes(p.users_conf, text.encode(), mode=0o600)


def argv(p: FrontPaths, nginx: str) -> list[str]:
    """nginx's command line: paths only."""
    return [nginx, "-p", str(p.root), "-c", str(p.conf)]
