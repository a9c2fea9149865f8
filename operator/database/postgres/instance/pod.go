package instance

// AgentImagePath is where the operator image holds the agent (built for
// the image's platform; cmd/deckhand-instance): a database pod's init
// container, running the operator image, copies it from there into an
// emptyDir with `deckhand-instance install`.
const AgentImagePath = "/usr/local/lib/deckhand/deckhand-instance"
