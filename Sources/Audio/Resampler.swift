import Wire

/// Rational-ratio polyphase FIR resampler between a device rate (16000, 24000, 44100 or
/// 48000 Hz) and a pipeline rate (16000, 24000 or 48000 Hz), on interleaved Int16.
///
/// Design (configuration time, Double): the ratio is reduced to L/M (44.1→48 kHz is
/// 160/147); one low-pass prototype of L·K taps is designed at the upsampled rate L·fin
/// as a Kaiser-windowed sinc (β = 8, ≈ 80 dB stopband) with its cutoff at 0.45·min(fin,
/// fout) and K = 48·fin/min(fin, fout) taps per phase (rounded up to a multiple of 4),
/// scaled by L and quantised to Q15 per phase. Output sample j sits at input position
/// j·M/L; its phase (j·M mod L) picks one row of K taps. 10 ms in always gives exactly
/// 10 ms out (e.g. 441 → 480 samples), because the position carries over between calls.
///
/// Hot path: a K-tap Int16×Int16 dot product per output sample, accumulated in 64 bits
/// (a row's tap magnitudes sum to about 2.1 for 3× interpolation near Nyquist, so a
/// full-scale worst-case input could pass 2^31), rounded and saturated. History is kept per channel, deinterleaved, in preallocated
/// storage; nothing is allocated per call.
public final class Resampler: @unchecked Sendable {
    public let inputRate: Int
    public let outputRate: Int
    public let channels: Int
    public let maxInputFrames: Int
    /// Upsampling factor L and decimation factor M (L/M = fout/fin, reduced).
    public let up: Int
    public let down: Int
    /// Taps per phase.
    public let tapsPerPhase: Int
    private let taps: UnsafeMutablePointer<Int16>  // up × tapsPerPhase, row = phase
    private let history: UnsafeMutablePointer<Int16> // channels × stride
    private let stride: Int
    private let state: UnsafeMutablePointer<ResamplerState>

    struct ResamplerState {
        var fill: Int   // samples per channel in history
        var base: Int   // input index of the next output's first tap
        var phase: Int  // 0..<up
    }

    /// The input rates the resampler accepts.
    public static let inputRates = [16000, 24000, 44100, 48000]

    public init(inputRate: Int, outputRate: SampleRate = .hz48000, channels: Int = 1,
                maxInputFrames: Int = 4800) throws(AudioError) {
        guard Resampler.inputRates.contains(inputRate) else { throw .unsupportedSampleRate(inputRate) }
        guard channels >= 1 && channels <= AudioFormat.maxChannels else { throw .unsupportedChannelCount(channels) }
        try checkRange(.maxInputFrames, Double(maxInputFrames), 1, 96000)
        self.inputRate = inputRate
        self.outputRate = outputRate.hertz
        self.channels = channels
        self.maxInputFrames = maxInputFrames
        var a = inputRate, b = outputRate.hertz
        while b != 0 { (a, b) = (b, a % b) }
        up = outputRate.hertz / a
        down = inputRate / a
        let fmin = Double(min(inputRate, outputRate.hertz))
        var k = Int(saturating: (48 * Double(inputRate) / fmin).rounded(.up))
        k = (k + 3) / 4 * 4
        tapsPerPhase = k
        taps = .allocate(capacity: up * k)
        taps.initialize(repeating: 0, count: up * k)
        stride = k + maxInputFrames
        history = .allocate(capacity: channels * stride)
        history.initialize(repeating: 0, count: channels * stride)
        state = .allocate(capacity: 1)
        state.initialize(to: ResamplerState(fill: k - 1, base: 0, phase: 0))
        if up != down { design(cutoff: 0.45 * fmin) }
    }

    deinit {
        taps.deallocate()
        history.deallocate()
        state.deallocate()
    }

    private func design(cutoff: Double) {
        let l = up, k = tapsPerPhase
        let n = l * k
        let fs = Double(inputRate) * Double(l)
        let fc = cutoff / fs // cycles per upsampled sample
        let beta = 8.0
        let i0beta = ConfigMath.besselI0(beta)
        let centre = Double(n - 1) / 2
        var proto = [Double](repeating: 0, count: n)
        for i in 0..<n {
            let t = Double(i) - centre
            let x = 2 * ConfigMath.pi * fc * t
            let sinc = t == 0 ? 2 * fc : ConfigMath.sin(x) / (ConfigMath.pi * t)
            let r = 2 * Double(i) / Double(n - 1) - 1
            let w = ConfigMath.besselI0(beta * (1 - r * r).squareRoot()) / i0beta
            proto[i] = sinc * w * Double(l)
        }
        // Row p, column c multiplies history[base + c], the input c − (K−1) samples from
        // the newest: prototype index p + (K−1−c)·L. Each row is normalised to a DC gain
        // of exactly 1 before quantising, so no phase adds a ripple at DC.
        for p in 0..<l {
            var sum = 0.0
            for c in 0..<k { sum += proto[p + (k - 1 - c) * l] }
            for c in 0..<k {
                let v = (proto[p + (k - 1 - c) * l] / sum * 32768).rounded()
                taps[p * k + c] = Int16(saturating: v)
            }
        }
    }

    /// Output samples (interleaved) that `inputFrames` frames of input can produce at most.
    public func maxOutputSamples(forInputFrames inputFrames: Int) -> Int {
        (inputFrames * up / down + 2) * channels
    }

    /// Consumes all of `input` (interleaved, a whole number of frames, at most
    /// `maxInputFrames`) and writes the output samples it completes; returns how many
    /// samples were written. Throws only for caller errors, before touching any state.
    #if RT_AUDIT
    @_noLocks
    #endif
    public func process(_ input: UnsafeBufferPointer<Int16>, into output: UnsafeMutableBufferPointer<Int16>) throws(AudioError) -> Int {
        let ch = channels
        let frames = input.count / ch
        if frames > maxInputFrames { throw .bufferTooSmall(needed: frames, available: maxInputFrames) }
        let needed = (frames * up / down + 2) * ch
        if output.count < needed { throw .bufferTooSmall(needed: needed, available: output.count) }
        if up == down {
            if let src = input.baseAddress, let dst = output.baseAddress { copySamples(dst, src, frames * ch) }
            return frames * ch
        }
        let k = tapsPerPhase
        var fill = state.pointee.fill
        // Append, deinterleaving.
        for c in 0..<ch {
            let h = history + c * stride + fill
            var i = c
            for f in 0..<frames {
                h[f] = input[i]
                i &+= ch
            }
        }
        fill &+= frames
        var base = state.pointee.base
        var phase = state.pointee.phase
        let stepBase = down / up
        let stepPhase = down % up
        var o = 0
        while base &+ k <= fill {
            let row = taps + phase &* k
            for c in 0..<ch {
                let h = history + c &* stride + base
                var acc: Int64 = 0
                for t in 0..<k { acc = acc &+ Int64(Int32(row[t]) &* Int32(h[t])) }
                let r = (acc &+ 0x4000) &>> 15
                output[o] = Int16(truncatingIfNeeded: min(max(r, -32768), 32767))
                o &+= 1
            }
            base &+= stepBase
            phase &+= stepPhase
            if phase >= up {
                phase &-= up
                base &+= 1
            }
        }
        // Keep what the next output still needs.
        let keep = fill &- base
        if keep > 0 && base > 0 {
            for c in 0..<ch {
                let h = history + c * stride
                copySamples(h, h + base, keep)
            }
        }
        state.pointee.fill = keep
        state.pointee.base = 0
        state.pointee.phase = phase
        return o
    }

    /// Forgets the history (start of a new capture session).
    public func reset() {
        // (A while loop: the range's iterator is a generic call for the RT audit, which
        // sees this from EchoCanceller.captureDidStart.)
        var i = 0
        while i < channels &* stride { history[i] = 0; i &+= 1 }
        state.pointee = ResamplerState(fill: tapsPerPhase - 1, base: 0, phase: 0)
    }
}
