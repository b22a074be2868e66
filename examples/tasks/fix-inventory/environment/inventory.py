"""Which products to reorder."""


def to_reorder(products: list[dict]) -> list[str]:
    """Names of the products whose stock is at or below their reorder point, in the order given."""
    return [p["name"] for p in products if p["stock"] > p["reorder_at"]]
