// The output queue of the sans-IO machines.

/// A FIFO drained by `pollOutput`: appended at the tail, read from a head index, its
/// storage reset (capacity kept) once drained. `removeFirst()` on an array moves every
/// element left, O(n) per output; this is O(1). The queue of every sans-IO machine's
/// `pollOutput` (ICE, the peer, the agent core and its supervisor).
public struct OutputQueue<Element> {
    private var items: [Element] = []
    private var head = 0

    public init() {}

    /// Outputs not yet taken.
    public var count: Int { items.count - head }
    public var isEmpty: Bool { head == items.count }

    public mutating func append(_ e: Element) { items.append(e) }

    public mutating func popFirst() -> Element? {
        guard head < items.count else { return nil }
        let e = items[head]
        head += 1
        if head == items.count {
            items.removeAll(keepingCapacity: true)
            head = 0
        }
        return e
    }
}
