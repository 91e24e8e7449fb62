"""A tiny status client. ``transport`` is any callable taking a URL and returning a status code."""

from netkit.retry import retry


@retry(times=3, exceptions=(ConnectionError,))
def fetch_status(transport, url: str) -> int:
    return transport(url)
