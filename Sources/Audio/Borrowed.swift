/// A reference to an object that something else keeps alive, used without reference
/// counting.
///
/// Why it exists: calling a method through an ordinary strong reference makes Swift
/// retain the object before the call and release it after, two atomic operations on a
/// cache line that the thread owning the object also touches. The audio threads call a
/// hook, a ring or a resampler on every 10 ms frame, so those pairs would be the most
/// contended instructions they run. The owner of a `Borrowed` keeps a strong reference
/// to the object for as long as it uses the view (each use below says who that is), and
/// `use` lends the object to its closure without a retain or a release.
///
/// This is the one place that says how; callers read as ordinary calls.
struct Borrowed<Object: AnyObject> {
    private let reference: Unmanaged<Object>

    /// A view of `object`, which the caller keeps alive for as long as the view is used.
    init(_ object: Object) { reference = .passUnretained(object) }

    /// Runs `body` with the object, with no retain or release around it.
    @inline(__always)
    func use<Result>(_ body: (Object) -> Result) -> Result {
        reference._withUnsafeGuaranteedRef(body)
    }

    /// Whether two views are of the same object.
    @inline(__always)
    func isSame(as other: Borrowed<Object>) -> Bool { reference.toOpaque() == other.reference.toOpaque() }
}
