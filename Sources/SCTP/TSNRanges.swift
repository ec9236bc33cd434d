/// The TSNs received above the cumulative TSN, as sorted disjoint ranges: the receiver's
/// gap ack blocks (RFC 9260 §3.3.4) kept ready instead of rebuilt for every SACK, so a
/// peer sending scattered TSNs costs O(log n) per chunk, not a sort per packet.
///
/// All TSNs lie within 2^16 above `base` (the cumulative TSN), so comparing their
/// distances from `base` orders them without wrap-around trouble.
struct TSNRanges {
    struct Range {
        var first: UInt32
        var last: UInt32
    }
    private(set) var ranges: [Range] = []

    var isEmpty: Bool { ranges.isEmpty }
    var count: Int { ranges.count }

    /// Index of the first range whose last TSN is not below `tsn`.
    private func lowerBound(_ tsn: UInt32, base: UInt32) -> Int {
        let d = tsn &- base
        var lo = 0
        var hi = ranges.count
        while lo < hi {
            let mid = (lo &+ hi) / 2
            if ranges[mid].last &- base < d { lo = mid &+ 1 } else { hi = mid }
        }
        return lo
    }

    func contains(_ tsn: UInt32, base: UInt32) -> Bool {
        let i = lowerBound(tsn, base: base)
        return i < ranges.count && ranges[i].first &- base <= tsn &- base
    }

    /// Adds a TSN (not already present), merging with its neighbours.
    mutating func insert(_ tsn: UInt32, base: UInt32) {
        let i = lowerBound(tsn, base: base)
        let joinsNext = i < ranges.count && ranges[i].first == tsn &+ 1
        let joinsPrev = i > 0 && ranges[i &- 1].last == tsn &- 1
        switch (joinsPrev, joinsNext) {
        case (true, true):
            ranges[i &- 1].last = ranges[i].last
            ranges.remove(at: i)
        case (true, false):
            ranges[i &- 1].last = tsn
        case (false, true):
            ranges[i].first = tsn
        case (false, false):
            ranges.insert(Range(first: tsn, last: tsn), at: i)
        }
    }

    /// If the lowest range starts right after `cum`, removes it and returns its end.
    mutating func popContiguous(after cum: UInt32) -> UInt32? {
        guard let f = ranges.first, f.first == cum &+ 1 else { return nil }
        ranges.removeFirst()
        return f.last
    }

    /// Drops every TSN up to and including `tsn` (FORWARD-TSN).
    mutating func removeThrough(_ tsn: UInt32, base: UInt32) {
        let d = tsn &- base
        var drop = 0
        while drop < ranges.count, ranges[drop].last &- base <= d { drop &+= 1 }
        ranges.removeFirst(drop)
        if let f = ranges.first, f.first &- base <= d { ranges[0].first = tsn &+ 1 }
    }

    mutating func removeAll() { ranges.removeAll() }
}
