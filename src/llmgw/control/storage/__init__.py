"""The store as the control plane's owners reach it: its one writer, reads off the event loop, and this server's
part in leadership."""
