"""deploy/tls/make-certs.sh: one folder per role, the CA key apart, identities per role."""

from __future__ import annotations

import ipaddress
import ssl
import stat
import subprocess

from cryptography import x509
from cryptography.x509.oid import NameOID

from dask_dppca.compute.trusted.trust import TRUSTED_WORKER_COMMON_NAME
from tests.deploy.recipes import COMMANDS, ROLE_FILES, ROOT, make_certs


def _certificate(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_each_role_gets_its_own_folder_and_the_ca_key_stays_apart(tmp_path):
    out = make_certs(tmp_path / "tls", "scheduler", "localhost", "127.0.0.1", "::1")
    roles = COMMANDS["roles"]
    assert sorted(p.name for p in out.iterdir()) == sorted([*roles, "ca"])
    assert sorted(p.name for p in (out / "ca").iterdir()) == ["ca.key", "ca.pem"]
    for role in roles:
        folder = out / role
        assert {p.name for p in folder.iterdir()} == ROLE_FILES[role]  # no ca.key, no other key
        context = ssl.create_default_context(cafile=str(folder / "ca.pem"))
        context.load_cert_chain(folder / f"{role}.pem", folder / f"{role}.key")
        verified = subprocess.run(
            [
                "openssl",
                "verify",
                "-CAfile",
                str(out / "ca" / "ca.pem"),
                str(folder / f"{role}.pem"),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert verified.returncode == 0, verified.stdout + verified.stderr
        subject = _certificate(folder / f"{role}.pem").subject
        (name,) = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        assert name.value == f"dask-dppca {role}"
    trusted = _certificate(out / "trusted-worker" / "trusted-worker.pem").subject.rfc4514_string()
    assert trusted == COMMANDS["trusted_worker_subject"] == f"CN={TRUSTED_WORKER_COMMON_NAME}"


def test_modes_keep_keys_to_their_owner_here_and_readable_in_a_container(tmp_path):
    out = make_certs(tmp_path / "tls")
    assert stat.S_IMODE(out.stat().st_mode) == 0o700  # nobody else reaches any key here
    assert stat.S_IMODE((out / "ca").stat().st_mode) == 0o700
    assert stat.S_IMODE((out / "ca" / "ca.key").stat().st_mode) == 0o600
    for role in COMMANDS["roles"]:
        # A role's folder is what gets mounted (compose) or put in a secret: readable by
        # the image's uid 1000 whoever made it (tests/system/test_live_recipes.py runs it).
        assert stat.S_IMODE((out / role).stat().st_mode) == 0o755
        for path in (out / role).iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_host_names_and_addresses_become_the_right_kind_of_name(tmp_path):
    out = make_certs(tmp_path / "tls", "scheduler", "10.1.2.3", "::1", "fd00::5")
    names = (
        _certificate(out / "scheduler" / "scheduler.pem")
        .extensions.get_extension_for_class(x509.SubjectAlternativeName)
        .value
    )
    assert names.get_values_for_type(x509.DNSName) == ["scheduler"]
    assert names.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.1.2.3"),
        ipaddress.ip_address("::1"),
        ipaddress.ip_address("fd00::5"),
    ]


def test_the_ca_can_live_in_a_private_folder_of_its_own(tmp_path):
    done = subprocess.run(
        [
            "sh",
            "-c",
            f"CA_DIR={tmp_path / 'private'} sh deploy/tls/make-certs.sh "
            f"{tmp_path / 'shared'} node1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "shared" / "ca").exists()
    assert (tmp_path / "private" / "ca.key").exists()
    assert {p.name for p in (tmp_path / "shared").iterdir()} == set(COMMANDS["roles"])
