"""A tiny status client. ``transport`` is any callable taking a URL and returning a status code."""


def fetch_status(transport, url: str) -> int:
    return transport(url)
