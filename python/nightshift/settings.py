"""Where the client's settings come from: exactly as the `nightshift` CLI (cli/options.cc,
cli/config.cc, common/client.cc).

A value comes from the argument, else the environment (NIGHTSHIFT_COORDINATOR,
NIGHTSHIFT_TOKEN), else the settings file, else the default. The settings file is
`config`, else NIGHTSHIFT_CONFIG (both must exist), else
$XDG_CONFIG_HOME/nightshift/config.yaml or ~/.config/nightshift/config.yaml (when there):
`key: value` lines with the keys coordinator, output, token, token_file, tls_ca,
tls_cert, tls_key; relative paths are relative to the file's folder. A token given as an
argument (token or token_file) or in NIGHTSHIFT_TOKEN keeps the file's token and
token_file out.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Dict, Optional

import yaml

from nightshift.errors import SettingsError

DEFAULT_COORDINATOR = "127.0.0.1:7070"
KEYS = ("coordinator", "output", "token", "token_file", "tls_ca", "tls_cert", "tls_key")
_PATH_KEYS = ("token_file", "tls_ca", "tls_cert", "tls_key")


@dataclasses.dataclass(frozen=True)
class Settings:
    """The resolved connection settings (the token read, files not yet)."""

    coordinator: str = DEFAULT_COORDINATOR  # HOST:PORT
    token: str = dataclasses.field(default="", repr=False)  # sent as `authorization: Bearer <token>`; empty: none
    tls_ca: str = ""  # PEM CA of the coordinator's certificate; empty: plaintext
    tls_cert: str = ""  # PEM client certificate (mutual TLS)
    tls_key: str = ""  # its PEM key


def config_path(config: Optional[str]) -> tuple[str, bool]:
    """The settings file to read and whether it must exist (named by argument or NIGHTSHIFT_CONFIG)."""
    if config:
        return config, True
    env = os.environ.get("NIGHTSHIFT_CONFIG", "")
    if env:
        return env, True
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    if xdg:
        return os.path.join(xdg, "nightshift", "config.yaml"), False
    home = os.environ.get("HOME", "")
    return (os.path.join(home, ".config", "nightshift", "config.yaml") if home else ""), False


def load_config(path: str, must_exist: bool) -> Dict[str, str]:
    """The settings file's values, checked as the CLI checks them; SettingsError naming the file and line."""
    if not path:
        return {}
    if not os.path.exists(path):
        if must_exist:
            raise SettingsError(f"config file {path} does not exist")
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            root = yaml.compose(f, Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError) as e:
        raise SettingsError(f"config file {path}: {e}") from e
    if root is None or (isinstance(root, yaml.ScalarNode) and root.value == ""):
        return {}
    if not isinstance(root, yaml.MappingNode):
        raise SettingsError(f"config file {path}: expected key: value pairs")
    folder = os.path.dirname(os.path.abspath(path))
    values: Dict[str, str] = {}
    for key_node, value_node in root.value:
        where = f"config file {path} line {key_node.start_mark.line + 1}"
        if not isinstance(key_node, yaml.ScalarNode):
            raise SettingsError(f"{where}: a key must be a name")
        key = str(key_node.value)
        if key not in KEYS:
            raise SettingsError(f'{where}: unknown key "{key}" (known: {", ".join(KEYS)})')
        if not isinstance(value_node, yaml.ScalarNode):
            raise SettingsError(f"{where}: {key} must be a single value")
        value = str(value_node.value)
        if key == "output" and value not in ("table", "json"):
            raise SettingsError(f'{where}: output must be table or json, not "{value}"')
        if key in _PATH_KEYS and value and not os.path.isabs(value):
            value = os.path.join(folder, value)
        values[key] = value
    return values


def read_token_file(path: str) -> str:
    """The first line of a token file, trimmed; SettingsError naming the file."""
    text = read_small_file(path, "token_file")
    token = text.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    if not token:
        raise SettingsError(f"token_file {path} holds no token")
    return token


def read_small_file(path: str, what: str) -> bytes:
    """A whole file of at most 1 MiB; SettingsError naming `what` it is for and the path."""
    try:
        with open(path, "rb") as f:
            data = f.read((1 << 20) + 1)
    except OSError as e:
        raise SettingsError(f"cannot read {what} {path} ({e.strerror})") from e
    if len(data) > (1 << 20):
        raise SettingsError(f"{what} {path} is larger than 1 MiB")
    return data


def resolve(coordinator: Optional[str] = None, token: Optional[str] = None, token_file: Optional[str] = None,
            tls_ca: Optional[str] = None, tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
            config: Optional[str] = None) -> Settings:
    """Arguments (None: not given), then the environment, then the settings file; the token read."""
    path, must_exist = config_path(config)
    file = load_config(path, must_exist)

    def pick(given: Optional[str], env: Optional[str], key: str, default: str = "") -> str:
        if given is not None:
            return given
        if env and os.environ.get(env):
            return os.environ[env]
        return file.get(key, default)

    address = pick(coordinator, "NIGHTSHIFT_COORDINATOR", "coordinator", DEFAULT_COORDINATOR)
    env_token = os.environ.get("NIGHTSHIFT_TOKEN", "")
    if token is None and token_file is None and not env_token:
        token, token_file = file.get("token"), file.get("token_file")
    if token:
        resolved = token
    elif token_file:
        resolved = read_token_file(token_file)
    else:
        resolved = env_token.strip()
    ca, cert, key = pick(tls_ca, None, "tls_ca"), pick(tls_cert, None, "tls_cert"), pick(tls_key, None, "tls_key")
    if not ca and (cert or key):
        raise SettingsError("tls_cert/tls_key need tls_ca (the CA of the coordinator)")
    if bool(cert) != bool(key):
        raise SettingsError("tls_cert and tls_key go together")
    return Settings(coordinator=address, token=resolved, tls_ca=ca, tls_cert=cert, tls_key=key)
