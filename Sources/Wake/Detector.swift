/// Wake-word decisions from a streaming microWakeWord model, made exactly as
/// pymicro-wakeword 2.5.0 makes them (microwakeword.py, MicroWakeWord.process_streaming
/// and process_streaming_prob):
///
/// - Feature frames (40 int8 values, 10 ms each) are collected until there are as many as
///   the model's input dimension 1 (3); no overlap ("stride instead of rolling"): they
///   are copied into the input in arrival order, one inference runs, and collection
///   starts again. A frame that completes no inference reports probability 0.0.
/// - The output is dequantised in float32, (q − zero_point) · scale (q/256 for these
///   models), and appended to a window of the last `slidingWindowSize` probabilities.
///   Until the window is full the step reports 0.0; then the window's exact mean
///   (statistics.mean: exact sum, one rounding; here a double sum, exact for
///   power-of-two output scales, then one division).
/// - Detected when that value is not ≤ `probabilityCutoff`, i.e. strictly greater (and,
///   as in Python, a NaN cutoff detects always). Nothing is reset on a detection: the
///   next steps keep reporting while the mean stays above the cutoff, as pymicro-wakeword's
///   live loop does. Its per-file command-line mode stops at the first detection and
///   calls reset(); `reset()` here is the same (frames, window, model state).
///
/// The cutoff and window come from the model's JSON ("micro": probability_cutoff,
/// sliding_window_size); the caller parses it. Nothing here allocates after `init`.
public final class WakeDetector {
    /// What one pushed frame (or one inference) produced.
    public struct Step {
        /// True when this frame completed an inference.
        public var ranInference: Bool
        /// The model's raw output byte from that inference (0 otherwise).
        public var output: UInt8
        /// The value pymicro-wakeword compares with the cutoff: the window mean, or 0.0
        /// while frames or probabilities are still being collected.
        public var probability: Double
        public var detected: Bool
    }

    public let model: WakeModel
    public let probabilityCutoff: Double
    public let slidingWindowSize: Int
    /// Frames per inference (input dimension 1) and values per frame.
    public let framesPerInference: Int
    public let featuresPerFrame: Int

    let window: UnsafeMutablePointer<Float>
    var windowCount = 0
    var windowNext = 0
    var framesQueued = 0

    /// `model` must take an int8 input [1, frames, features] (microWakeWord: [1, 3, 40]).
    public init(model: WakeModel, probabilityCutoff: Double, slidingWindowSize: Int) throws(WakeModelError) {
        let shape = model.inputShape
        guard shape.count == 3, shape[0] == 1, model.output.count == 1,
              slidingWindowSize >= 1, slidingWindowSize <= 4096 else {
            throw .badModelIO
        }
        self.model = model
        self.probabilityCutoff = probabilityCutoff
        self.slidingWindowSize = slidingWindowSize
        framesPerInference = shape[1]
        featuresPerFrame = shape[2]
        window = UnsafeMutablePointer<Float>.allocate(capacity: slidingWindowSize)
        window.initialize(repeating: 0, count: slidingWindowSize)
    }

    /// Loads a model from its file bytes.
    public convenience init(modelBytes: [UInt8], probabilityCutoff: Double, slidingWindowSize: Int,
                            limits: WakeModel.Limits = WakeModel.Limits()) throws(WakeModelError) {
        try self.init(model: try WakeModel(bytes: modelBytes, limits: limits),
                      probabilityCutoff: probabilityCutoff, slidingWindowSize: slidingWindowSize)
    }

    deinit {
        window.deallocate()
    }

    /// Forgets queued frames and probabilities and returns the model to its initial state
    /// (pymicro-wakeword's reset(), which reloads the model).
    public func reset() {
        framesQueued = 0
        windowCount = 0
        windowNext = 0
        model.reset()
    }

    /// One feature frame (`featuresPerFrame` values); every `framesPerInference`-th frame
    /// runs the model.
    public func pushFrame(_ frame: UnsafeBufferPointer<Int8>) -> Step {
        precondition(frame.count >= featuresPerFrame)
        let dst = model.input.baseAddress! + framesQueued * featuresPerFrame
        dst.update(from: frame.baseAddress!, count: featuresPerFrame)
        framesQueued += 1
        if framesQueued < framesPerInference {
            return Step(ranInference: false, output: 0, probability: 0, detected: decide(0))
        }
        framesQueued = 0
        return infer()
    }

    /// One inference's worth of frames at once (`framesPerInference · featuresPerFrame`
    /// values, oldest frame first), as when frames are already grouped in threes.
    public func process(_ features: UnsafeBufferPointer<Int8>) -> Step {
        let n = framesPerInference * featuresPerFrame
        precondition(features.count >= n)
        model.input.baseAddress!.update(from: features.baseAddress!, count: n)
        framesQueued = 0
        return infer()
    }

    func infer() -> Step {
        model.invoke()
        let byte = model.outputByte
        let q: Float = model.outputIsUnsigned ? Float(byte) : Float(Int8(bitPattern: byte))
        // numpy: (output.astype(float32) − zero_point) · scale, in float32.
        let probability = (q - Float(model.outputZeroPoint)) * model.outputScale
        window[windowNext] = probability
        windowNext = windowNext + 1 == slidingWindowSize ? 0 : windowNext + 1
        if windowCount < slidingWindowSize { windowCount += 1 }
        var value = 0.0
        if windowCount == slidingWindowSize {
            var sum = 0.0
            for i in 0 ..< slidingWindowSize { sum += Double(window[i]) }
            value = sum / Double(slidingWindowSize)
        }
        return Step(ranInference: true, output: byte, probability: value, detected: decide(value))
    }

    /// `if prob <= self.probability_cutoff: return False` … `return True`.
    @inline(__always)
    func decide(_ value: Double) -> Bool {
        !(value <= probabilityCutoff)
    }
}
