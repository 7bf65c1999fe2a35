"""Models shared by the router tier and the container manager: ids, action documents, errors."""
