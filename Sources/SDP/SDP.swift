/// SDP: the offer/answer model (RFC 8866, the JSEP subset of RFC 8829): build offers
/// and answers, parse real peers' answers tolerantly (PROTOCOLS.md "Parser tolerance").
/// (Contents arrive with issue 4.)
import Wire
