"""Full screens pushed over the key table: a key's detail, the scope catalog, the audit trail."""
