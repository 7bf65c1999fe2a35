"""Ask TLS clients for a certificate without verifying it in the handshake, as kube-apiserver
does (Go's ``tls.RequestClientCert``): the authenticators verify it per CA bundle, so a bad
certificate gets a 401 naming the reason and a reloaded bundle applies to open connections.

Python's ``ssl`` verifies whatever it requests (``CERT_OPTIONAL`` fails the handshake for an
unknown CA). OpenSSL lets a context replace that verification
(``SSL_CTX_set_cert_verify_callback``); ``ssl`` does not expose it, so it is called through
``ctypes`` on the ``SSL_CTX`` the context wraps, in the very libssl ``_ssl`` is linked with.
The pointer is the first field after the object header of CPython's ``PySSLContext``; it is
checked against the context's verify mode and options before use, and a build where the
check fails (or ``ctypes`` is absent) gets ``PeerCertUnsupported``, naming why.

Only the chain check is replaced: OpenSSL still checks the client's CertificateVerify (that it
holds the key). As the handshake "verified" everything, ``getpeercert()``'s dict form would
describe an unverified certificate: only the authenticators' verification may be believed.
"""

from __future__ import annotations

import _ssl  # the C module itself: its libssl is the one the contexts live in
import ctypes
import ssl
import sys
import sysconfig

_VERIFY_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def _accept_any(_store_ctx: int | None, _arg: int | None) -> int:
    return 1  # verified later, against the right bundle (gateway.asgi.clientcert)


_accept = _VERIFY_CB(_accept_any)  # kept alive as long as the module: OpenSSL holds it


class PeerCertUnsupported(RuntimeError):
    pass


def _libssl() -> ctypes.CDLL:
    lib = ctypes.CDLL(_ssl.__file__)
    lib.SSL_CTX_set_cert_verify_callback.argtypes = [ctypes.c_void_p, _VERIFY_CB, ctypes.c_void_p]
    lib.SSL_CTX_set_cert_verify_callback.restype = None
    lib.SSL_CTX_get_verify_mode.argtypes = [ctypes.c_void_p]
    lib.SSL_CTX_get_verify_mode.restype = ctypes.c_int
    lib.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
    lib.SSL_CTX_get_options.restype = ctypes.c_uint64
    return lib


def request_client_certificates(ctx: ssl.SSLContext) -> None:
    """Make ``ctx`` ask for a client certificate and accept any in the handshake; the peer's
    leaf is then ``getpeercert(binary_form=True)``. No certificate is fine too."""
    if sys.implementation.name != "cpython" or sysconfig.get_config_var("Py_GIL_DISABLED"):
        raise PeerCertUnsupported("client certificates need the standard CPython build")
    if hasattr(sys, "gettotalrefcount"):
        raise PeerCertUnsupported("client certificates need a non-debug CPython build")
    ctx.verify_mode = ssl.CERT_OPTIONAL
    lib = _libssl()
    pointer = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    if not pointer:
        raise PeerCertUnsupported("no SSL_CTX found in ssl.SSLContext")
    # SSL_VERIFY_PEER = 1: what CERT_OPTIONAL sets; the options must match the context's too.
    if lib.SSL_CTX_get_verify_mode(pointer) != 1 or lib.SSL_CTX_get_options(pointer) != int(
        ctx.options
    ):
        raise PeerCertUnsupported("ssl.SSLContext layout not recognized")
    lib.SSL_CTX_set_cert_verify_callback(pointer, _accept, None)
