"""What work ran: ops, modules, annotations and the FLOPs and bytes each carried."""
