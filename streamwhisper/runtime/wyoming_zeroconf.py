"""Announce the Wyoming port over mDNS (zeroconf), for Home Assistant's discovery.

Only with ``[server] wyoming_zeroconf`` (flag ``--wyoming-zeroconf``), and only with the optional
``zeroconf`` package (``pip install 'streamwhisper[zeroconf]'``, the ``wyoming`` package's own
``zeroconf`` extra), which is imported when the announcement starts. The service is
``_wyoming._tcp.local.``, as the ``wyoming`` package's servers announce it.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

from streamwhisper.errors import ConfigError

SERVICE_TYPE = "_wyoming._tcp.local."
MDNS_GROUP = "224.0.0.251"  # only to find the address of the interface that reaches the LAN
WILDCARDS = ("", "0.0.0.0", "::")


@dataclass(frozen=True)
class Announcement:
    """What is announced: the instance ``name``, the ``address`` and the Wyoming ``port``."""

    name: str
    address: str
    port: int

    @property
    def service_name(self) -> str:
        return f"{self.name}.{SERVICE_TYPE}"


def _lan_address() -> str:
    """This machine's address on the interface that reaches the mDNS group (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((MDNS_GROUP, 1))
        except OSError as exc:
            text = f"cannot find this machine's LAN address for zeroconf ({exc}); set server.wyoming_host"
            raise ConfigError(text) from None
        return str(probe.getsockname()[0])


def announcement(host: str, port: int, name: str | None = None) -> Announcement:
    """The announcement for a Wyoming port listening on ``host`` (a wildcard: the LAN address)."""
    address = _lan_address() if host in WILDCARDS else socket.gethostbyname(host)
    name = name or f"streamwhisper-{socket.gethostname().split('.')[0]}"
    return Announcement(name[:63], address, port)


async def advertise(what: Announcement) -> Any:
    """Register the service; returns the handle :func:`withdraw` takes."""
    try:
        from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf
    except ImportError:
        raise ConfigError(
            "wyoming_zeroconf needs the zeroconf package: pip install 'streamwhisper[zeroconf]'"
        ) from None
    info = AsyncServiceInfo(
        SERVICE_TYPE, what.service_name, addresses=[ipaddress.ip_address(what.address).packed], port=what.port
    )
    handle = AsyncZeroconf()
    await handle.async_register_service(info)
    return handle


async def withdraw(handle: Any) -> None:
    """Unregister the service and close zeroconf's sockets."""
    await handle.async_close()
