"""A small inventory module: the README's quick start completes a line in it."""

import json
from dataclasses import dataclass, field


@dataclass
class Item:
    name: str
    price: float
    quantity: int = 0
    tags: list[str] = field(default_factory=list)

    def total(self) -> float:
        return self.price * self.quantity


class Inventory:
    def __init__(self):
        self.items: dict[str, Item] = {}

    def add(self, item: Item) -> None:
        if item.name in self.items:
            self.items[item.name].quantity += item.quantity
        else:
            self.items[item.name] = item

    def remove(self, name: str) -> Item:
        return self.items.pop(name)

    def value(self) -> float:
        return sum(item.total() for item in self.items.values())

    def to_json(self) -> str:
        return json.dumps({name: item.__dict__ for name, item in self.items.items()})


def add(a, b):
    return 
