"""Warehouse inventory: stock levels, reports, persistence."""
