"""A private certificate authority and PEM files of what it issued, made
with trustme, for the built-in handlers' TLS tests (webhook, send_email)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme

LOOPBACK = "127.0.0.1"


@dataclass
class Pki:
    """A private authority, and PEM files of what it issued, made with trustme."""

    authority: trustme.CA
    ca_file: str
    client_cert: str
    client_key: str
    client_both: str  # certificate and key in one file
    stranger_key: str  # a key of another certificate

    def server(self, ask_client: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.authority.issue_cert(LOOPBACK).configure_cert(context)
        if ask_client:
            context.verify_mode = ssl.CERT_REQUIRED
            self.authority.configure_trust(context)
        return context


def make(directory: Path) -> Pki:
    """A new authority, its certificate and a client's in ``directory``."""
    authority = trustme.CA()
    client = authority.issue_cert("subs-listener")
    files = {
        "ca_file": authority.cert_pem,
        "client_cert": client.cert_chain_pems[0],
        "client_key": client.private_key_pem,
        "client_both": client.private_key_and_cert_chain_pem,
        "stranger_key": trustme.CA().issue_cert("someone").private_key_pem,
    }
    for name, blob in files.items():
        blob.write_to_path(directory / f"{name}.pem")
    return Pki(authority, **{name: str(directory / f"{name}.pem") for name in files})
