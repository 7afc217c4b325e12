"""Which addresses a remote image fetch may connect to, decided after DNS resolution, and pinned.

A server that fetches URLs for its clients must not become their way into
the operator's network (server-side request forgery): the server itself,
other hosts on private networks, cloud metadata at 169.254.169.254. A check of
the URL's text can't decide that (`http://2130706433/` is 127.0.0.1, and any
name can resolve to anything), so each hop's host is resolved here, every
address it resolves to must be public, and the connection then goes to the
address that was checked (the request names the IP, with the original Host
header and TLS server name), so a second lookup can't answer differently.

Refused unless the operator allows private media (`--allow-private-media`):
loopback, private (RFC 1918, unique-local), link-local, multicast,
unspecified, reserved and other non-global addresses, IPv4 addresses inside
IPv6 ones (mapped, 6to4, Teredo) judged as IPv4.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressRefused(Exception):
    """This hop may not be fetched; the text is for the server log, never for the client."""


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (blocking); tests replace this function to stub DNS."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError) as exc:
        raise AddressRefused(f"{host!r} does not resolve: {exc}") from None
    return list(dict.fromkeys(info[4][0] for info in infos))


def is_public(address: IPAddress) -> bool:
    """Whether an address is one that a fetch may reach without --allow-private-media."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour or (address.teredo[1] if address.teredo else None)
        if embedded is not None:
            return is_public(embedded)
    # is_global is False for loopback, RFC 1918, link-local, unique-local, unspecified, reserved, shared (CGNAT)
    # and documentation ranges; multicast has global ranges, refused all the same.
    return address.is_global and not address.is_multicast


@dataclass(frozen=True)
class PinnedHop:
    """One hop of a fetch: the URL as the client named it and the checked address to connect to."""

    url: httpx.URL
    address: str

    def request(self, client: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        """A GET to the checked address that the remote host sees as a request for `url`."""
        target = self.url.copy_with(host=self.address)
        host_header = self.url.host if self.url.port is None else f"{self.url.host}:{self.url.port}"
        extensions = {"sni_hostname": self.url.host} if self.url.scheme == "https" else {}
        return client.build_request("GET", target, headers={"Host": host_header}, extensions=extensions)


def check_hop(url: httpx.URL, allow_private: bool) -> PinnedHop:
    """The pinned hop for `url`, or AddressRefused (scheme, resolution or address)."""
    if url.scheme not in ("http", "https"):
        raise AddressRefused(f"scheme {url.scheme!r} is not http(s)")
    host = url.host
    if not host:
        raise AddressRefused("the URL names no host")
    port = url.port or (443 if url.scheme == "https" else 80)
    addresses = resolve(host, port)
    if not addresses:
        raise AddressRefused(f"{host!r} resolves to no address")
    parsed = []
    for text in addresses:
        try:
            parsed.append(ipaddress.ip_address(text.split("%", 1)[0]))   # drop an IPv6 zone id
        except ValueError:
            raise AddressRefused(f"{host!r} resolved to {text!r}, not an IP address") from None
    if not allow_private:
        refused = [str(a) for a in parsed if not is_public(a)]
        if refused:
            raise AddressRefused(f"{host!r} resolves to non-public address(es) {', '.join(refused)}")
    return PinnedHop(url, str(parsed[0]))
