"""Where a live programme's webhook events may go (server-side request forgery, D16; issue 32):
only to public unicast addresses. Checked when a live programme's webhook URL is set
(`programmes.service`) and again at each delivery (`webhooks.delivery`, which connects only to
the addresses checked); in the kernel, below both (issue 42 §1)."""

from __future__ import annotations

import asyncio
import socket
from ipaddress import IPv4Address, IPv4Network, IPv6Network, ip_address
from urllib.parse import urlsplit

# Addresses the stdlib's `is_global` lets through on some Python releases (its lists changed
# in patch releases) that no webhook receiver may be at: the deprecated 6to4 relay anycast
# (RFC 7526), the IETF protocol assignments, 6to4 itself (newer lists call it not global) and
# IPv6's documentation prefix of RFC 9637. The same rule whichever Python runs the server.
_REFUSED_V4 = (IPv4Network("192.88.99.0/24"), IPv4Network("192.0.0.0/24"))
_REFUSED_V6 = (IPv6Network("2002::/16"), IPv6Network("3fff::/20"))
_SHARED = IPv4Network("100.64.0.0/10")
# IPv6's global unicast space: everything outside it is special-purpose (IPv4-compatible
# `::a.b.c.d`, site-local `fec0::/10`, SRv6 `5f00::/16`...), whatever `is_global` says.
_GLOBAL_UNICAST = IPv6Network("2000::/3")
# NAT64 (RFC 6052, RFC 8215): the IPv4 address is the last 32 bits. The well-known prefix is
# what DNS64 answers on an IPv6-only network, so it is judged by the address it embeds.
_NAT64_WELL_KNOWN = IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = IPv6Network("64:ff9b:1::/48")


def _v4_refusal(ip: IPv4Address) -> str | None:
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip in _SHARED:
        return "a shared (carrier-grade NAT) address"
    if ip.is_private or not ip.is_global or any(ip in n for n in _REFUSED_V4):
        return "a private or reserved address"
    return None


def address_refusal(address: str) -> str | None:
    """Why a live programme's events may not go to `address` (an IP address as text, maybe
    with an IPv6 zone); None when it is a public unicast address. An IPv6 address that carries
    an IPv4 one (IPv4-mapped, 6to4, Teredo, NAT64) is refused unless what it carries is public
    too: a gateway would deliver it there."""
    try:
        ip = ip_address(address.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    if isinstance(ip, IPv4Address):
        return _v4_refusal(ip)
    mapped = ip.ipv4_mapped
    if mapped is not None:
        why = _v4_refusal(mapped)
        return None if why is None else f"an IPv4-mapped address of {mapped}, {why}"
    embedded: list[IPv4Address] = []
    if ip in _NAT64_WELL_KNOWN or ip in _NAT64_LOCAL:
        embedded.append(IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip.sixtofour is not None:
        embedded.append(ip.sixtofour)
    if ip.teredo is not None:
        embedded.extend(ip.teredo)  # the Teredo server and the client behind it
    for v4 in embedded:
        why = _v4_refusal(v4)
        if why is not None:
            return f"an address embedding {v4}, {why}"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip in _NAT64_WELL_KNOWN:
        return None  # what it embeds is public (above)
    if (
        ip not in _GLOBAL_UNICAST
        or ip.is_private
        or not ip.is_global
        or any(ip in n for n in _REFUSED_V6)
    ):
        return "a private or reserved address"
    return None


async def resolve(host: str) -> list[str]:
    """The addresses `host` resolves to, in the resolver's order, each once."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def checked_addresses(url: str) -> tuple[list[str], str | None]:
    """(the addresses `url`'s host resolves to, why they may not receive a live programme's
    events or None). Every address is checked: a name with one private address among public
    ones is refused, as the client could connect to any of them."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return [], "the URL is not valid"
    if not host:
        return [], "the URL names no host"
    try:
        addresses = await resolve(host)
    except (OSError, UnicodeError, ValueError):
        return [], f"{host} does not resolve"
    if not addresses:
        return [], f"{host} does not resolve"
    for address in addresses:
        why = address_refusal(address)
        if why is not None:
            return [], f"{host} resolves to {address}, {why}; only public addresses are allowed"
    return addresses, None


async def refused_destination(url: str) -> str | None:
    """Why `url` may not receive a live programme's events (it resolves to a loopback,
    link-local, private, reserved or multicast address, or not at all); None when it may."""
    return (await checked_addresses(url))[1]
