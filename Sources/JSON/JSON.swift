/// JSON: RFC 8259 values, parsed and serialized, for signaling bodies and data-channel
/// events. Depth and size limits bound what a hostile peer can make us allocate.
/// (Contents arrive with the agent work, issue 6.)
import Wire
