/// The microWakeWord feature extractor: TensorFlow Lite Micro's audio "microfrontend"
/// (tensorflow/lite/experimental/microfrontend/lib), re-implemented bit for bit as
/// pymicro-features 2.0.2 builds it (kissfft with FIXED_POINT=16) and with the settings
/// pymicro-features passes (src/micro_features.cpp) and microWakeWord models are trained on:
/// 16 kHz int16 mono; 30 ms Hann window (480 samples, Q12) every 10 ms (160 samples);
/// 512-point fixed-point real FFT; 40 mel channels 125–7500 Hz; noise reduction
/// (smoothing_bits 10, even 0.025, odd 0.06, min_signal_remaining 0.05); PCAN gain
/// control (strength 0.95, offset 80, gain_bits 21); log scale (scale_shift 6).
/// File names below (window.cc, fft.cc, …) are those of that lib/ folder in the
/// pymicro-features sdist; kissfft's are kissfft/kiss_fft.cc and tools/kiss_fftr.cc.
///
/// Framing is TFLM's FrontendProcessSamples: samples are appended to a 480-sample window
/// buffer; once it is full a frame is computed and the buffer slides by 160. Fed 160
/// samples a call (as pymicro-features always does), the first two calls return no frame,
/// the third and every later one return one: frame n covers samples 160·n ..< 160·n + 480.
///
/// Tables are built once in `init` with the same float→fixed steps as TFLM's *_util.cc;
/// the libm functions they call (cosf, powf, log1pf; cos and sin for kissfft's
/// twiddles) are computed here without libm (see `InitMath`). Swift never fuses a
/// multiply and an add, so the float steps round as an x86-64 build of the C does (an
/// arm64 build with GCC's default -ffp-contract=fast fuses some and gets three
/// filterbank weights off by one; with -ffp-contract=off it builds these tables).
/// `step` and `process` allocate nothing: all buffers are allocated in `init`.
public final class WakeFrontend {
    public static let sampleRate = 16_000
    /// Samples per step (10 ms) and per analysis window (30 ms).
    public static let stepSamples = 160
    public static let windowSamples = 480
    /// Features per frame (mel channels).
    public static let featureCount = 40

    // Fixed settings (micro_features.cpp) and TFLM's constants (the lib/*.h headers).
    static let fftSize = 512              // fft_util.cc: next power of two ≥ 480
    static let complexSize = 256          // kiss_fftr packs the 512 reals as 256 complex
    static let spectrumSize = 257         // fft_size / 2 + 1
    static let channelsPlusOne = 41       // filterbank keeps one extra (lowest) channel
    static let stageTwiddleCount = 85     // 1 + 4 + 16 + 64
    static let windowBits: Int32 = 12     // kFrontendWindowBits (window.h)
    static let filterbankBits = 12        // kFilterbankBits (filterbank.h)
    static let noiseReductionBits: UInt64 = 14  // kNoiseReductionBits
    static let smoothingBits: UInt32 = 10
    static let pcanSnrBits = 12           // kPcanSnrBits
    static let pcanOutputBits = 6         // kPcanOutputBits
    static let gainBits = 21
    static let wideDynamicFunctionBits = 32
    static let gainLUTSize = 4 * 32 - 3   // kWideDynamicFunctionLUTSize
    static let logScaleShift: UInt32 = 6
    /// frontend.cc: MostSignificantBit32(fft_size) − 1 − kFilterbankBits / 2 = 10 − 1 − 6.
    static let correctionBits = 3

    // Tables (init; internal so tests can compare them with TFLM's).
    let window: UnsafeMutablePointer<Int16>           // 480, Q12
    let twiddles: UnsafeMutablePointer<Int16>         // 256 complex (re, im), Q15
    let superTwiddles: UnsafeMutablePointer<Int16>    // 128 complex, Q15
    let digitReversal: UnsafeMutablePointer<UInt8>    // 256
    /// Each radix-4 stage's twiddles w^k, w^2k, w^3k laid out by k (real parts, then
    /// imaginary parts), so the butterfly loops read them in order.
    let stageTwiddles: UnsafeMutablePointer<Int16>    // 6 × 85
    let channelFrequencyStarts: UnsafeMutablePointer<Int16>  // 41
    let channelWeightStarts: UnsafeMutablePointer<Int16>     // 41
    let channelWidths: UnsafeMutablePointer<Int16>           // 41
    let weights: UnsafeMutablePointer<Int16>
    let unweights: UnsafeMutablePointer<Int16>
    let weightCount: Int
    let startIndex: Int
    let endIndex: Int
    let evenSmoothing: UInt32
    let oddSmoothing: UInt32
    let minSignalRemaining: UInt32
    let gainLUT: UnsafeMutablePointer<Int16>          // 125
    let snrShift: UInt64
    let logLUT: UnsafeMutablePointer<UInt16>          // 130
    let quantTable: UnsafeMutablePointer<Int8>
    let quantCount: Int

    // State and scratch (init; reset zeroes the state).
    private let input: UnsafeMutablePointer<Int16>            // 480
    private var inputUsed = 0
    private let fftInput: UnsafeMutablePointer<Int16>         // 512
    private let fftWork: UnsafeMutablePointer<Int16>          // 256 real parts, then 256 imaginary
    private let fftOutput: UnsafeMutablePointer<Int16>        // 257 complex
    private let energy: UnsafeMutablePointer<Int32>           // 257
    private let work: UnsafeMutablePointer<UInt64>            // 41
    private let signal: UnsafeMutablePointer<UInt32>          // 40
    private let noiseEstimate: UnsafeMutablePointer<UInt32>   // 40
    private let output: UnsafeMutablePointer<UInt16>          // 40

    public init() {
        let n = WakeFrontend.windowSamples

        // window_util.cc: Hann, 0.5 − 0.5·cos(2π(i + ½)/N) in float, to Q12 by floor(v·4096 + ½).
        window = .allocate(capacity: n)
        let arg = Float(Double.pi) * 2 / Float(n)
        for i in 0..<n {
            let v: Float = 0.5 - 0.5 * InitMath.cosf(arg * (Float(i) + 0.5))
            window[i] = Int16((v * Float(1 << WakeFrontend.windowBits) + 0.5).rounded(.down))
        }

        // kiss_fft.cc kiss_fft_alloc / kiss_fftr.cc kiss_fftr_alloc, FIXED_POINT=16:
        // twiddle = floor(½ + 32767·cos|sin(phase)) in double.
        let nc = WakeFrontend.complexSize
        twiddles = .allocate(capacity: 2 * nc)
        for i in 0..<nc {
            let phase = -2 * Double.pi * Double(i) / Double(nc)
            twiddles[2 * i] = Int16((0.5 + 32767 * InitMath.cos(phase)).rounded(.down))
            twiddles[2 * i + 1] = Int16((0.5 + 32767 * InitMath.sin(phase)).rounded(.down))
        }
        superTwiddles = .allocate(capacity: nc)
        for i in 0..<(nc / 2) {
            let phase = -Double.pi * (Double(i + 1) / Double(nc) + 0.5)
            superTwiddles[2 * i] = Int16((0.5 + 32767 * InitMath.cos(phase)).rounded(.down))
            superTwiddles[2 * i + 1] = Int16((0.5 + 32767 * InitMath.sin(phase)).rounded(.down))
        }
        // kf_factor(256) = 4·4·4·4, so kf_work's recursion reads its input in base-4
        // digit-reversed order and then runs four radix-4 stages.
        digitReversal = .allocate(capacity: nc)
        for i in 0..<nc {
            let d0: Int = i & 3, d1: Int = (i >> 2) & 3, d2: Int = (i >> 4) & 3, d3: Int = i >> 6
            digitReversal[i] = UInt8(d0 << 6 | d1 << 4 | d2 << 2 | d3)
        }
        // Stage with m butterflies per block (m = 1, 4, 16, 64) reads twiddles at stride
        // 256 / 4m (kf_bfly4's tw1, tw2, tw3); its entries start at (m − 1) / 3.
        stageTwiddles = .allocate(capacity: 6 * WakeFrontend.stageTwiddleCount)
        var m = 1
        while m < nc {
            let fstride = nc / (4 * m)
            for k in 0..<m {
                for q in 1...3 {
                    let t = q * k * fstride
                    let at = (2 * (q - 1)) * WakeFrontend.stageTwiddleCount + (m - 1) / 3 + k
                    stageTwiddles[at] = twiddles[2 * t]
                    stageTwiddles[at + WakeFrontend.stageTwiddleCount] = twiddles[2 * t + 1]
                }
            }
            m *= 4
        }

        // filterbank_util.cc FilterbankPopulateState, float for float.
        let channels = WakeFrontend.channelsPlusOne
        let lower: Float = 125, upper: Float = 7500
        var centers = ContiguousArray<Float>(repeating: 0, count: channels)
        let melLow = InitMath.freqToMel(lower)
        let melHigh = InitMath.freqToMel(upper)
        let melSpacing = (melHigh - melLow) / Float(channels)
        for i in 0..<channels { centers[i] = melLow + melSpacing * Float(i + 1) }
        let hzPerSbin = 0.5 * Float(WakeFrontend.sampleRate) / (Float(WakeFrontend.spectrumSize) - 1)
        let start = Int(1.5 + lower / hzPerSbin)
        startIndex = start
        channelFrequencyStarts = .allocate(capacity: channels)
        channelWeightStarts = .allocate(capacity: channels)
        channelWidths = .allocate(capacity: channels)
        var actualStarts = ContiguousArray<Int>(repeating: 0, count: channels)
        var actualWidths = ContiguousArray<Int>(repeating: 0, count: channels)
        let indexAlignment = 2     // kFilterbankIndexAlignment (4 bytes) / sizeof(int16_t)
        let blockSize = 4          // kFilterbankChannelBlockSize
        var chanStart = start
        var weightIndex = 0
        var needsZeros = false
        for chan in 0..<channels {
            var freqIndex = chanStart
            while InitMath.freqToMel(Float(freqIndex) * hzPerSbin) <= centers[chan] { freqIndex += 1 }
            let width = freqIndex - chanStart
            actualStarts[chan] = chanStart
            actualWidths[chan] = width
            if width == 0 {
                // An empty channel reads a block of zero weights kept at the front.
                channelFrequencyStarts[chan] = 0
                channelWeightStarts[chan] = 0
                channelWidths[chan] = Int16(blockSize)
                if !needsZeros {
                    needsZeros = true
                    for j in 0..<chan { channelWeightStarts[j] += Int16(blockSize) }
                    weightIndex += blockSize
                }
            } else {
                let alignedStart = (chanStart / indexAlignment) * indexAlignment
                let alignedWidth = chanStart - alignedStart + width
                let paddedWidth = ((alignedWidth - 1) / blockSize + 1) * blockSize
                channelFrequencyStarts[chan] = Int16(alignedStart)
                channelWeightStarts[chan] = Int16(weightIndex)
                channelWidths[chan] = Int16(paddedWidth)
                weightIndex += paddedWidth
            }
            chanStart = freqIndex
        }
        weightCount = weightIndex
        weights = .allocate(capacity: weightIndex)
        weights.initialize(repeating: 0, count: weightIndex)
        unweights = .allocate(capacity: weightIndex)
        unweights.initialize(repeating: 0, count: weightIndex)
        var end = 0
        let scale = Float(1 << WakeFrontend.filterbankBits)
        for chan in 0..<channels {
            var frequency = actualStarts[chan]
            let offset = frequency - Int(channelFrequencyStarts[chan])
            let weightStart = Int(channelWeightStarts[chan])
            let denom = chan == 0 ? melLow : centers[chan - 1]
            for j in 0..<actualWidths[chan] {
                let w = (centers[chan] - InitMath.freqToMel(Float(frequency) * hzPerSbin)) / (centers[chan] - denom)
                weights[weightStart + offset + j] = Int16((w * scale + 0.5).rounded(.down))
                unweights[weightStart + offset + j] = Int16(((1 - w) * scale + 0.5).rounded(.down))
                frequency += 1
            }
            if frequency > end { end = frequency }
        }
        precondition(end < WakeFrontend.spectrumSize)
        endIndex = end

        // noise_reduction_util.cc: float·2^14, truncated to uint16.
        let nrScale = Float(1 << WakeFrontend.noiseReductionBits)
        evenSmoothing = UInt32(UInt16(Float(0.025) * nrScale))
        oddSmoothing = UInt32(UInt16(Float(0.06) * nrScale))
        minSignalRemaining = UInt32(UInt16(Float(0.05) * nrScale))

        // pcan_gain_control_util.cc: gain(x) = 2^21·(x/2^input_bits + 80)^−0.95 in float,
        // sampled at x0, 1.5·x0 and 2·x0 of each octave and stored as a quadratic
        // (y0, a1, a2) at lut[4·interval − 6 …]; entries 0 and 1 are gain(0), gain(1).
        snrShift = UInt64(WakeFrontend.gainBits - WakeFrontend.correctionBits - WakeFrontend.pcanSnrBits)
        let inputBits = Int(WakeFrontend.smoothingBits) - WakeFrontend.correctionBits
        gainLUT = .allocate(capacity: WakeFrontend.gainLUTSize)
        gainLUT.initialize(repeating: 0, count: WakeFrontend.gainLUTSize)
        gainLUT[0] = WakeFrontend.pcanGain(inputBits: inputBits, 0)
        gainLUT[1] = WakeFrontend.pcanGain(inputBits: inputBits, 1)
        for interval in 2...WakeFrontend.wideDynamicFunctionBits {
            let x0 = UInt32(1) << UInt32(interval - 1)
            let x1 = x0 + (x0 >> 1)
            let x2 = interval == WakeFrontend.wideDynamicFunctionBits ? x0 + (x0 - 1) : 2 * x0
            let y0 = WakeFrontend.pcanGain(inputBits: inputBits, x0)
            let y1 = WakeFrontend.pcanGain(inputBits: inputBits, x1)
            let y2 = WakeFrontend.pcanGain(inputBits: inputBits, x2)
            let diff1 = Int32(y1) - Int32(y0)
            let diff2 = Int32(y2) - Int32(y0)
            let a1 = 4 * diff1 - diff2
            let a2 = diff2 - a1
            gainLUT[4 * interval - 6] = y0
            gainLUT[4 * interval - 5] = Int16(truncatingIfNeeded: a1)
            gainLUT[4 * interval - 4] = Int16(truncatingIfNeeded: a2)
        }

        logLUT = .allocate(capacity: WakeFrontend.logTable.count)
        for i in 0..<WakeFrontend.logTable.count { logLUT[i] = WakeFrontend.logTable[i] }

        // The int8 model input for each feature value, up to the first value that
        // reaches 127 (it is monotonic, so every larger value gives 127 too).
        var count = 0
        while count < 65535 && WakeFrontend.quantizeReference(UInt16(count)) < 127 { count += 1 }
        quantCount = count + 1
        quantTable = .allocate(capacity: quantCount)
        for v in 0..<quantCount { quantTable[v] = WakeFrontend.quantizeReference(UInt16(v)) }

        input = .allocate(capacity: n)
        fftInput = .allocate(capacity: WakeFrontend.fftSize)
        fftWork = .allocate(capacity: 2 * nc)
        fftOutput = .allocate(capacity: 2 * WakeFrontend.spectrumSize)
        energy = .allocate(capacity: WakeFrontend.spectrumSize)
        work = .allocate(capacity: channels)
        signal = .allocate(capacity: WakeFrontend.featureCount)
        noiseEstimate = .allocate(capacity: WakeFrontend.featureCount)
        output = .allocate(capacity: WakeFrontend.featureCount)
        input.initialize(repeating: 0, count: n)
        fftInput.initialize(repeating: 0, count: WakeFrontend.fftSize)
        fftWork.initialize(repeating: 0, count: 2 * nc)
        fftOutput.initialize(repeating: 0, count: 2 * WakeFrontend.spectrumSize)
        energy.initialize(repeating: 0, count: WakeFrontend.spectrumSize)
        work.initialize(repeating: 0, count: channels)
        signal.initialize(repeating: 0, count: WakeFrontend.featureCount)
        noiseEstimate.initialize(repeating: 0, count: WakeFrontend.featureCount)
        output.initialize(repeating: 0, count: WakeFrontend.featureCount)
    }

    deinit {
        window.deallocate(); twiddles.deallocate(); superTwiddles.deallocate()
        digitReversal.deallocate(); stageTwiddles.deallocate()
        channelFrequencyStarts.deallocate(); channelWeightStarts.deallocate(); channelWidths.deallocate()
        weights.deallocate(); unweights.deallocate(); gainLUT.deallocate(); logLUT.deallocate()
        quantTable.deallocate()
        input.deallocate(); fftInput.deallocate(); fftWork.deallocate(); fftOutput.deallocate()
        energy.deallocate(); work.deallocate(); signal.deallocate(); noiseEstimate.deallocate()
        output.deallocate()
    }

    /// Back to the state after `init` (FrontendReset: empty window, noise estimates 0).
    public func reset() {
        input.update(repeating: 0, count: WakeFrontend.windowSamples)
        inputUsed = 0
        noiseEstimate.update(repeating: 0, count: WakeFrontend.featureCount)
        output.update(repeating: 0, count: WakeFrontend.featureCount)
    }

    /// Feeds one 10 ms step (exactly 160 samples, as pymicro-features' process_samples
    /// takes them) and, when a frame is produced (every call from the third on), writes
    /// its 40 features quantised to the models' int8 input (see `quantize`).
    @discardableResult
    public func step(_ samples: UnsafeBufferPointer<Int16>, into features: UnsafeMutableBufferPointer<Int8>) -> Bool {
        precondition(samples.count == WakeFrontend.stepSamples && features.count >= WakeFrontend.featureCount)
        var consumed = 0
        guard process(samples, consumed: &consumed) else { return false }
        let out = features.baseAddress!
        for i in 0..<WakeFrontend.featureCount { out[i] = quantize(output[i]) }
        return true
    }

    /// As `step(_:into:)`, writing the raw uint16 features (pymicro-features' values
    /// before its ×0.0390625).
    @discardableResult
    public func step(_ samples: UnsafeBufferPointer<Int16>, raw features: UnsafeMutableBufferPointer<UInt16>) -> Bool {
        precondition(samples.count == WakeFrontend.stepSamples && features.count >= WakeFrontend.featureCount)
        var consumed = 0
        guard process(samples, consumed: &consumed) else { return false }
        features.baseAddress!.update(from: output, count: WakeFrontend.featureCount)
        return true
    }

    /// The last frame's 40 raw features; valid until the next call that produces a frame.
    public var features: UnsafeBufferPointer<UInt16> {
        UnsafeBufferPointer(start: output, count: WakeFrontend.featureCount)
    }

    /// TFLM's FrontendProcessSamples for any count: takes as many samples as fit in the
    /// window buffer (`consumed`, at most 480 − buffered) and returns true when that
    /// completed a frame, now in `features`.
    @_optimize(speed)
    public func process(_ samples: UnsafeBufferPointer<Int16>, consumed: inout Int) -> Bool {
        let size = WakeFrontend.windowSamples
        let take = min(size - inputUsed, samples.count)
        if take > 0 { (input + inputUsed).update(from: samples.baseAddress!, count: take) }
        consumed = take
        inputUsed += take
        if inputUsed < size { return false }
        computeFrame()
        // window.cc: slide the buffer down by one step (a memmove).
        let step = WakeFrontend.stepSamples
        for i in 0..<(size - step) { input[i] = input[i + step] }
        inputUsed -= step
        return true
    }

    /// pymicro-wakeword 2.5.0 (microwakeword.py process_streaming_prob) feeds the model
    /// round(value·0.0390625 / input_scale + zero_point), in float64 with numpy's round
    /// half to even; every bundled model has input scale float32(26/255) and zero point
    /// −128. From value 667 on that is past 127 and numpy's astype(int8) wraps it
    /// (128 → −128): only there this differs, clamping to 127 instead.
    @inline(__always)
    public func quantize(_ value: UInt16) -> Int8 {
        let v = Int(value)
        return v < quantCount ? quantTable[v] : 127
    }

    static func quantizeReference(_ value: UInt16) -> Int8 {
        let inputScale = Double(Float(bitPattern: 0x3DD0_D0D1))   // float32(26/255), the models' own
        let feature = Double(value) * 0.0390625                    // micro_features.cpp FLOAT32_SCALE
        let q = (feature / inputScale + -128).rounded(.toNearestOrEven)
        return Int8(min(max(q, -128), 127))
    }

    // MARK: - One frame (frontend.cc FrontendProcessSamples)

    @_optimize(speed)
    private func computeFrame() {
        // window.cc: (sample·coefficient) >> 12, tracking the largest magnitude; −32768
        // negates to itself in int16 and so never counts.
        var maxAbs: Int16 = 0
        for i in 0..<WakeFrontend.windowSamples {
            let v = Int16(truncatingIfNeeded: (Int32(input[i]) &* Int32(window[i])) &>> WakeFrontend.windowBits)
            fftInput[i] = v
            let a = v < 0 ? 0 &- v : v
            if a > maxAbs { maxAbs = a }
        }
        // frontend.cc: scale up so the largest value uses 15 bits; fft.cc shifts it as
        // uint16 and keeps the low 16 bits.
        let shift = 15 - WakeFrontend.msb32(UInt32(truncatingIfNeeded: Int32(maxAbs)))
        for i in 0..<WakeFrontend.windowSamples {
            fftInput[i] = Int16(truncatingIfNeeded: UInt32(UInt16(bitPattern: fftInput[i])) &<< UInt32(shift))
        }
        for i in WakeFrontend.windowSamples..<WakeFrontend.fftSize { fftInput[i] = 0 }

        realFFT()

        // filterbank.cc FilterbankConvertFftComplexToEnergy: re² + im² in int32 (wraps
        // only for −32768 in both), kept as int32 as TFLM's aliased buffer does. Bins
        // outside start..<end keep 0 here; in TFLM they hold raw FFT words, but only
        // ever meet zero padding weights.
        for i in startIndex..<endIndex {
            let re = Int32(fftOutput[2 * i]), im = Int32(fftOutput[2 * i + 1])
            energy[i] = re &* re &+ im &* im
        }

        // filterbank.cc FilterbankAccumulateChannels: each bin adds weight·energy to its
        // channel and (1 − weight)·energy to the next, in uint64 (an int32 energy is
        // sign-extended first, as C's conversion does).
        var weightAccumulator: UInt64 = 0
        var unweightAccumulator: UInt64 = 0
        for chan in 0..<WakeFrontend.channelsPlusOne {
            let magnitudes = energy + Int(channelFrequencyStarts[chan])
            let w = weights + Int(channelWeightStarts[chan])
            let u = unweights + Int(channelWeightStarts[chan])
            for j in 0..<Int(channelWidths[chan]) {
                let m = UInt64(bitPattern: Int64(magnitudes[j]))
                weightAccumulator = weightAccumulator &+ UInt64(bitPattern: Int64(w[j])) &* m
                unweightAccumulator = unweightAccumulator &+ UInt64(bitPattern: Int64(u[j])) &* m
            }
            work[chan] = weightAccumulator
            weightAccumulator = unweightAccumulator
            unweightAccumulator = 0
        }

        // filterbank.cc FilterbankSqrt: channel 0 is dropped; undo the FFT input shift.
        for i in 0..<WakeFrontend.featureCount {
            signal[i] = WakeFrontend.sqrt64(work[i + 1]) >> UInt32(shift)
        }

        noiseReduction()
        pcanGainControl()
        logScale()
    }

    // MARK: - FFT (kiss_fft.cc and tools/kiss_fftr.cc, FIXED_POINT=16)

    /// kiss_fftr on 512 reals: a 256-point complex FFT of the even/odd pairs, then the
    /// split into the 257-bin half spectrum. Every stage divides by its radix (C_FIXDIV),
    /// so the output is the DFT / 512.
    @_optimize(speed)
    @inline(__always)
    private func realFFT() {
        let nc = WakeFrontend.complexSize
        let re = fftWork, im = fftWork + nc
        for k in 0..<nc {
            let s = Int(digitReversal[k])
            re[k] = fftInput[2 * s]
            im[k] = fftInput[2 * s + 1]
        }
        // kf_work's recursion, stage by stage: blocks of 4m combined with radix-4
        // butterflies. Blocks are independent, so the order in which they are combined
        // does not change a bit. The first stage (m = 1) runs across blocks.
        let tc = WakeFrontend.stageTwiddleCount
        let tw = stageTwiddles
        let w1r = tw[0], w1i = tw[tc], w2r = tw[2 * tc], w2i = tw[3 * tc], w3r = tw[4 * tc], w3i = tw[5 * tc]
        for b in 0..<(nc / 4) {
            WakeFrontend.butterfly4(re, im, 4 * b, 1, w1r, w1i, w2r, w2i, w3r, w3i)
        }
        var m = 4
        while m < nc {
            let t = tw + (m - 1) / 3
            var block = 0
            while block < nc {
                for k in 0..<m {
                    WakeFrontend.butterfly4(re, im, block + k, m, t[k], t[tc + k], t[2 * tc + k], t[3 * tc + k], t[4 * tc + k], t[5 * tc + k])
                }
                block += 4 * m
            }
            m *= 4
        }

        // kiss_fftr.cc: DC and Nyquist from bin 0, then bins k and 256 − k together.
        let out = fftOutput
        let dcRe = WakeFrontend.fixDiv(re[0], by2: true), dcIm = WakeFrontend.fixDiv(im[0], by2: true)
        out[0] = dcRe &+ dcIm
        out[1] = 0
        out[2 * nc] = dcRe &- dcIm
        out[2 * nc + 1] = 0
        for k in 1...(nc / 2) {
            let pkRe = WakeFrontend.fixDiv(re[k], by2: true)
            let pkIm = WakeFrontend.fixDiv(im[k], by2: true)
            let pnkRe = WakeFrontend.fixDiv(re[nc - k], by2: true)
            let pnkIm = WakeFrontend.fixDiv(0 &- im[nc - k], by2: true)
            let f1Re = pkRe &+ pnkRe, f1Im = pkIm &+ pnkIm
            let f2Re = pkRe &- pnkRe, f2Im = pkIm &- pnkIm
            let (twRe, twIm) = WakeFrontend.complexMultiply(f2Re, f2Im, superTwiddles[2 * (k - 1)], superTwiddles[2 * (k - 1) + 1])
            // HALF_OF is an arithmetic >> 1 of the int sum. At k = 128 both writes hit
            // bin 128 and the second stands, as in C.
            out[2 * k] = Int16(truncatingIfNeeded: (Int32(f1Re) + Int32(twRe)) >> 1)
            out[2 * k + 1] = Int16(truncatingIfNeeded: (Int32(f1Im) + Int32(twIm)) >> 1)
            out[2 * (nc - k)] = Int16(truncatingIfNeeded: (Int32(f1Re) - Int32(twRe)) >> 1)
            out[2 * (nc - k) + 1] = Int16(truncatingIfNeeded: (Int32(twIm) - Int32(f1Im)) >> 1)
        }
    }

    /// kf_bfly4, forward, on elements i, i + m, i + 2m, i + 3m. int16 sums wrap as C's
    /// stores to int16 do (&+, &-).
    @inline(__always)
    static func butterfly4(_ re: UnsafeMutablePointer<Int16>, _ im: UnsafeMutablePointer<Int16>, _ i: Int, _ m: Int,
                           _ w1r: Int16, _ w1i: Int16, _ w2r: Int16, _ w2i: Int16, _ w3r: Int16, _ w3i: Int16) {
        let i0 = i, i1 = i + m, i2 = i + 2 * m, i3 = i + 3 * m
        let a0r = fixDiv(re[i0], by2: false), a0i = fixDiv(im[i0], by2: false)
        let a1r = fixDiv(re[i1], by2: false), a1i = fixDiv(im[i1], by2: false)
        let a2r = fixDiv(re[i2], by2: false), a2i = fixDiv(im[i2], by2: false)
        let a3r = fixDiv(re[i3], by2: false), a3i = fixDiv(im[i3], by2: false)
        let (s0r, s0i) = complexMultiply(a1r, a1i, w1r, w1i)
        let (s1r, s1i) = complexMultiply(a2r, a2i, w2r, w2i)
        let (s2r, s2i) = complexMultiply(a3r, a3i, w3r, w3i)
        let s5r = a0r &- s1r, s5i = a0i &- s1i
        let b0r = a0r &+ s1r, b0i = a0i &+ s1i
        let s3r = s0r &+ s2r, s3i = s0i &+ s2i
        let s4r = s0r &- s2r, s4i = s0i &- s2i
        re[i2] = b0r &- s3r
        im[i2] = b0i &- s3i
        re[i0] = b0r &+ s3r
        im[i0] = b0i &+ s3i
        re[i1] = s5r &+ s4i
        im[i1] = s5i &- s4r
        re[i3] = s5r &- s4i
        im[i3] = s5i &+ s4r
    }

    /// C_FIXDIV: x·(32767 / radix) rounded back to Q15 (sround), radix 2 or 4.
    @inline(__always)
    static func fixDiv(_ x: Int16, by2: Bool) -> Int16 {
        let k: Int32 = by2 ? 16383 : 8191
        return Int16(truncatingIfNeeded: (Int32(x) &* k &+ 16384) &>> 15)
    }

    /// C_MUL: Q15 complex product, each part sround(ar·br ∓ ai·bi) in int32.
    @inline(__always)
    static func complexMultiply(_ ar: Int16, _ ai: Int16, _ br: Int16, _ bi: Int16) -> (Int16, Int16) {
        let re = Int32(ar) &* Int32(br) &- Int32(ai) &* Int32(bi)
        let im = Int32(ar) &* Int32(bi) &+ Int32(ai) &* Int32(br)
        return (Int16(truncatingIfNeeded: (re &+ 16384) &>> 15), Int16(truncatingIfNeeded: (im &+ 16384) &>> 15))
    }

    // MARK: - Noise reduction, PCAN, log (noise_reduction.cc, pcan_gain_control.cc, log_scale.cc)

    /// A per-channel noise estimate (smoothing 0.025 on even channels, 0.06 on odd, in
    /// Q14) is subtracted, keeping at least 5 % of the signal.
    @_optimize(speed)
    @inline(__always)
    private func noiseReduction() {
        let one: UInt32 = 1 << UInt32(WakeFrontend.noiseReductionBits)
        for i in 0..<WakeFrontend.featureCount {
            let smoothing = i & 1 == 0 ? evenSmoothing : oddSmoothing
            let oneMinusSmoothing = one &- smoothing
            let s = signal[i]
            let scaledUp = s &<< WakeFrontend.smoothingBits   // uint32: high bits are lost, as in C
            var estimate = UInt32(truncatingIfNeeded:
                (UInt64(scaledUp) &* UInt64(smoothing) &+ UInt64(noiseEstimate[i]) &* UInt64(oneMinusSmoothing))
                    >> WakeFrontend.noiseReductionBits)
            noiseEstimate[i] = estimate
            if estimate > scaledUp { estimate = scaledUp }
            let floor = UInt32(truncatingIfNeeded: (UInt64(s) &* UInt64(minSignalRemaining)) >> WakeFrontend.noiseReductionBits)
            let subtracted = (scaledUp &- estimate) >> WakeFrontend.smoothingBits
            signal[i] = subtracted > floor ? subtracted : floor
        }
    }

    /// Per-channel gain from the (just updated) noise estimate, then the PCAN shrink.
    @_optimize(speed)
    @inline(__always)
    private func pcanGainControl() {
        for i in 0..<WakeFrontend.featureCount {
            // int16 gain to uint32 sign-extends, as C's conversion does.
            let gain = UInt32(bitPattern: Int32(wideDynamicFunction(noiseEstimate[i])))
            let snr = UInt32(truncatingIfNeeded: (UInt64(signal[i]) &* UInt64(gain)) >> snrShift)
            signal[i] = WakeFrontend.pcanShrink(snr)
        }
    }

    /// WideDynamicFunction: the gain LUT's quadratic for x's octave, at x's next 10 bits.
    @_optimize(speed)
    @inline(__always)
    private func wideDynamicFunction(_ x: UInt32) -> Int16 {
        if x <= 2 { return gainLUT[Int(x)] }
        let interval = Int32(WakeFrontend.msb32(x))
        let lut = gainLUT + Int(4 * interval - 6)
        let bits = interval < 11 ? x &<< UInt32(11 - interval) : x &>> UInt32(interval - 11)
        let frac = Int32(bits & 0x3FF)
        var result = (Int32(lut[2]) &* frac) &>> 5
        result = result &+ (Int32(lut[1]) &<< 5)
        result = result &* frac
        result = (result &+ (1 << 14)) &>> 15
        result = result &+ Int32(lut[0])
        return Int16(truncatingIfNeeded: result)
    }

    @inline(__always)
    static func pcanShrink(_ x: UInt32) -> UInt32 {
        if x < UInt32(2 << pcanSnrBits) {
            return (x &* x) >> UInt32(2 + 2 * pcanSnrBits - pcanOutputBits)
        }
        return (x >> UInt32(pcanSnrBits - pcanOutputBits)) &- (1 << UInt32(pcanOutputBits))
    }

    /// log_scale.cc: 64·ln(x·2^3) in fixed point (log2 from a 128-segment table,
    /// then ×ln 2), saturated to uint16; 0 for x·8 ≤ 1.
    @_optimize(speed)
    @inline(__always)
    private func logScale() {
        for i in 0..<WakeFrontend.featureCount {
            var value = signal[i] &<< UInt32(WakeFrontend.correctionBits)
            value = value > 1 ? log(value) : 0
            output[i] = value < 0xFFFF ? UInt16(truncatingIfNeeded: value) : 0xFFFF
        }
    }

    @_optimize(speed)
    @inline(__always)
    private func log(_ x: UInt32) -> UInt32 {
        let integer = UInt32(WakeFrontend.msb32(x) - 1)
        // Log2FractionPart: the bits below the leading one as a Q16 fraction, plus the
        // table's correction interpolated between segments.
        var frac = Int32(truncatingIfNeeded: Int64(x) - (Int64(1) << Int64(integer)))
        if integer < 16 { frac = frac &<< Int32(16 - integer) } else { frac = frac &>> Int32(integer - 16) }
        let baseSeg = Int(UInt32(bitPattern: frac &>> 9))
        let c0 = Int32(logLUT[baseSeg])
        let c1 = Int32(logLUT[baseSeg + 1])
        let segBase = Int32(truncatingIfNeeded: 512 * baseSeg)
        let relPos = ((c1 &- c0) &* (frac &- segBase)) &>> 16
        let fraction = UInt32(bitPattern: frac &+ c0 &+ relPos)
        let log2 = (integer &<< 16) &+ fraction
        let loge = UInt32(truncatingIfNeeded: (UInt64(45426) &* UInt64(log2) &+ 32768) >> 16)  // kLogCoeff = 2^16·ln 2
        return ((loge &<< WakeFrontend.logScaleShift) &+ 32768) >> 16
    }

    // MARK: - Helpers

    /// bits.h MostSignificantBit32: 0 for 0, else 1 + index of the top set bit.
    @inline(__always)
    static func msb32(_ n: UInt32) -> Int { 32 - n.leadingZeroBitCount }

    /// filterbank.cc Sqrt32: bitwise integer square root, rounded to nearest (without
    /// passing 0xFFFF).
    @inline(__always)
    static func sqrt32(_ n: UInt32) -> UInt16 {
        if n == 0 { return 0 }
        var num = n
        var res: UInt32 = 0
        let maxBit = (32 - msb32(num)) | 1
        var bit: UInt32 = 1 &<< UInt32(31 - maxBit)
        var iterations = (31 - maxBit) / 2 + 1
        while iterations > 0 {
            iterations -= 1
            if num >= res &+ bit {
                num &-= res &+ bit
                res = (res >> 1) &+ bit
            } else {
                res >>= 1
            }
            bit >>= 2
        }
        if num > res && res != 0xFFFF { res &+= 1 }
        return UInt16(truncatingIfNeeded: res)
    }

    /// filterbank.cc Sqrt64: the same on 64 bits when the value needs them.
    @_optimize(speed)
    @inline(__always)
    static func sqrt64(_ n: UInt64) -> UInt32 {
        if n >> 32 == 0 { return UInt32(sqrt32(UInt32(truncatingIfNeeded: n))) }
        var num = n
        var res: UInt64 = 0
        let maxBit = (64 - (64 - num.leadingZeroBitCount)) | 1
        var bit: UInt64 = 1 &<< UInt64(63 - maxBit)
        var iterations = (63 - maxBit) / 2 + 1
        while iterations > 0 {
            iterations -= 1
            if num >= res &+ bit {
                num &-= res &+ bit
                res = (res >> 1) &+ bit
            } else {
                res >>= 1
            }
            bit >>= 2
        }
        if num > res && res != 0xFFFF_FFFF { res &+= 1 }
        return UInt32(truncatingIfNeeded: res)
    }

    /// pcan_gain_control_util.cc PcanGainLookupFunction, float for float.
    static func pcanGain(inputBits: Int, _ x: UInt32) -> Int16 {
        let xAsFloat = Float(x) / Float(UInt32(1) << UInt32(inputBits))
        let gain = Float(UInt32(1) << UInt32(gainBits)) * InitMath.powf(xAsFloat + 80, -Float(0.95))
        if gain > Float(0x7FFF) { return 0x7FFF }
        return Int16(gain + 0.5)
    }

    /// log_lut.cc kLogLut: TFLM's correction from the linear to the true log2 of
    /// 1 + i/128 in Q16 (a table of constants, as in TFLM).
    static let logTable: [UInt16] = [
        0, 224, 442, 654, 861, 1063, 1259, 1450, 1636, 1817, 1992, 2163,
        2329, 2490, 2646, 2797, 2944, 3087, 3224, 3358, 3487, 3611, 3732, 3848,
        3960, 4068, 4172, 4272, 4368, 4460, 4549, 4633, 4714, 4791, 4864, 4934,
        5001, 5063, 5123, 5178, 5231, 5280, 5326, 5368, 5408, 5444, 5477, 5507,
        5533, 5557, 5578, 5595, 5610, 5622, 5631, 5637, 5640, 5641, 5638, 5633,
        5626, 5615, 5602, 5586, 5568, 5547, 5524, 5498, 5470, 5439, 5406, 5370,
        5332, 5291, 5249, 5203, 5156, 5106, 5054, 5000, 4944, 4885, 4825, 4762,
        4697, 4630, 4561, 4490, 4416, 4341, 4264, 4184, 4103, 4020, 3935, 3848,
        3759, 3668, 3575, 3481, 3384, 3286, 3186, 3084, 2981, 2875, 2768, 2659,
        2549, 2437, 2323, 2207, 2090, 1971, 1851, 1729, 1605, 1480, 1353, 1224,
        1094, 963, 830, 695, 559, 421, 282, 142, 0, 0,
    ]
}

/// The libm functions TFLM's init calls, without libm (Embedded Swift, pure module).
/// cosf and powf are computed in double and rounded once to float: at every argument the
/// tables use, that gives glibc's integer tables (checked against pymicro-features; the
/// closest call is window coefficients 17 and 462, one float ulp of cosf from rounding
/// the other way, where correctly rounded cosf and glibc agree).
/// log1pf is different: the filterbank weights depend on its last bit (a correctly
/// rounded log1pf changes four weights of the table by one), so it repeats, step for
/// step, the float fdlibm log1pf of glibc's sysdeps/ieee754/flt-32/s_log1pf.c, which
/// Debian 12's glibc 2.36 uses on x86-64 and arm64 alike. glibc 2.41 replaced it with a
/// correctly rounded one: pymicro-features there builds those four weights differently.
enum InitMath {
    static func freqToMel(_ freq: Float) -> Float { 1127 * log1pf(freq / 700) }

    static func cosf(_ x: Float) -> Float { Float(cos(Double(x))) }

    /// x^y for x > 0.
    static func powf(_ x: Float, _ y: Float) -> Float { Float(exp(Double(y) * log(Double(x)))) }

    /// fdlibm's float log1p (Sun Microsystems, 1993: "Permission to use, copy, modify,
    /// and distribute this software is freely granted, provided that this notice is
    /// preserved."), for finite x > −1: log1p(x) = k·ln2 + log(1 + f) with
    /// 1 + f ∈ [√2/2, √2), the latter from s = f/(2 + f) and a degree-14 series in s.
    static func log1pf(_ x: Float) -> Float {
        let ln2Hi = Float(bitPattern: 0x3F31_7180), ln2Lo = Float(bitPattern: 0x3717_F7D1)
        let lp1 = Float(bitPattern: 0x3F2A_AAAB), lp2 = Float(bitPattern: 0x3ECC_CCCD)
        let lp3 = Float(bitPattern: 0x3E92_4925), lp4 = Float(bitPattern: 0x3E63_8E29)
        let lp5 = Float(bitPattern: 0x3E3A_3325), lp6 = Float(bitPattern: 0x3E1C_D04F)
        let lp7 = Float(bitPattern: 0x3E17_8897)
        let hx = Int32(bitPattern: x.bitPattern)
        let ax = hx & 0x7FFF_FFFF
        var k: Int32 = 1
        var f: Float = 0, c: Float = 0
        var hu: Int32 = 0
        if hx < 0x3ED4_13D7 {                       // x < 0.41422
            if ax >= 0x3F80_0000 { return x == -1 ? -.infinity : .nan }
            if ax < 0x3100_0000 {                   // |x| < 2^-29
                return ax < 0x2480_0000 ? x : x - x * x * 0.5
            }
            if hx > 0 || hx <= Int32(bitPattern: 0xBE95_F61F) {   // −0.2929 < x < 0.41422
                k = 0; f = x; hu = 1
            }
        }
        if hx >= 0x7F80_0000 { return x + x }
        if k != 0 {
            var u: Float
            if hx < 0x5A00_0000 {
                u = 1 + x
                hu = Int32(bitPattern: u.bitPattern)
                k = (hu >> 23) - 127
                c = k > 0 ? 1 - (u - x) : x - (u - 1)   // the rounding error of 1 + x
                c /= u
            } else {
                u = x
                hu = Int32(bitPattern: u.bitPattern)
                k = (hu >> 23) - 127
                c = 0
            }
            hu &= 0x007F_FFFF
            if hu < 0x3504F7 {
                u = Float(bitPattern: UInt32(bitPattern: hu | 0x3F80_0000))   // u in [1, √2)
            } else {
                k += 1
                u = Float(bitPattern: UInt32(bitPattern: hu | 0x3F00_0000))   // u/2 in [√2/2, 1)
                hu = (0x0080_0000 - hu) >> 2
            }
            f = u - 1
        }
        let hfsq: Float = 0.5 * f * f
        let kf = Float(k)
        if hu == 0 {                                // |f| < 2^-20
            if f == 0 {
                if k == 0 { return 0 }
                c += kf * ln2Lo
                return kf * ln2Hi + c
            }
            let r = hfsq * (1 - Float(0.66666666666666666) * f)
            if k == 0 { return f - r }
            return kf * ln2Hi - ((r - (kf * ln2Lo + c)) - f)
        }
        let s = f / (2 + f)
        let z = s * s
        let r = z * (lp1 + z * (lp2 + z * (lp3 + z * (lp4 + z * (lp5 + z * (lp6 + z * lp7))))))
        if k == 0 { return f - (hfsq - s * (hfsq + r)) }
        return kf * ln2Hi - ((hfsq - (s * (hfsq + r) + (kf * ln2Lo + c))) - f)
    }

    // Double precision, to about an ulp: enough that rounding to float, or kissfft's
    // floor(½ + 32767·x), lands where libm's does for the arguments used here.

    /// π/2 as a 33-bit head (so k·head is exact for small k) and the rest.
    static let pio2Hi = 1.57079632673412561417e+00
    static let pio2Lo = 6.07710050650619224932e-11
    static let ln2Hi = 6.93147180369123816490e-01   // 32-bit head of ln 2
    static let ln2Lo = 1.90821492927058770002e-10

    static func cos(_ x: Double) -> Double { sinCos(x).cos }
    static func sin(_ x: Double) -> Double { sinCos(x).sin }

    /// For |x| up to a few π: x = k·π/2 + r with |r| ≤ π/4 (Cody–Waite), then Taylor
    /// series of sin r and cos r (terms to r^23, below 2^-70 of the result).
    static func sinCos(_ x: Double) -> (sin: Double, cos: Double) {
        let k = (x * 0.63661977236758134308).rounded()   // 2/π
        let r = (x - k * pio2Hi) - k * pio2Lo
        let z = r * r
        var s = 1.0, c = 1.0
        var n = 22.0
        while n >= 2 {
            s = 1 - z / ((n) * (n + 1)) * s        // sin r / r = 1 − z/(2·3)(1 − z/(4·5)(…))
            c = 1 - z / ((n - 1) * n) * c          // cos r = 1 − z/(1·2)(1 − z/(3·4)(…))
            n -= 2
        }
        s *= r
        switch Int(k) & 3 {
        case 0: return (s, c)
        case 1: return (c, -s)
        case 2: return (-s, -c)
        default: return (-c, s)
        }
    }

    /// Natural log for finite x > 0: x = 2^e·m, m ∈ [√2/2, √2), f = m − 1,
    /// log m = f − f²/2 + s(f²/2 + R), s = f/(2 + f), R = Σ 2s^(2j)/(2j + 1).
    static func log(_ x: Double) -> Double {
        var e = Int(x.exponent)
        var m = x.significand
        if m > 1.4142135623730951 { m /= 2; e += 1 }
        let f = m - 1
        let s = f / (2 + f)
        let z = s * s
        var r = 0.0
        var j = 12.0
        while j >= 1 {
            r = z * (2 / (2 * j + 1) + r)
            j -= 1
        }
        let hfsq = 0.5 * f * f
        let de = Double(e)
        return de * ln2Hi - ((hfsq - (s * (hfsq + r) + de * ln2Lo)) - f)
    }

    /// e^x for |x| < 700: x = k·ln2 + r, |r| ≤ ln2/2, Taylor series of e^r to r^20.
    static func exp(_ x: Double) -> Double {
        let k = (x / (ln2Hi + ln2Lo)).rounded()
        let r = (x - k * ln2Hi) - k * ln2Lo
        var p = 1.0
        var n = 20.0
        while n >= 1 {
            p = 1 + r / n * p
            n -= 1
        }
        return p * Double(sign: .plus, exponent: Int(k), significand: 1)
    }
}
