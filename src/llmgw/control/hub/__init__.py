"""Hub models: each `hf://` source of the catalog resolved to one commit and its files, through a bounded HTTP
client."""
