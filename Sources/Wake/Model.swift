/// The microWakeWord model runner, part 1: reading a `.tflite` file and planning it.
///
/// A `.tflite` file is a FlatBuffer of TensorFlow Lite's schema
/// (tensorflow/lite/schema/schema.fbs, file identifier "TFL3", schema version 3). The
/// reader below is written from that schema: tables reach their fields through a
/// vtable of 16-bit offsets, and tables, vectors and strings are reached by 32-bit
/// offsets relative to where the offset is stored. The file comes from outside, so every
/// offset, vtable, vector length, tensor shape and buffer size is checked before use, and
/// anything this runner does not implement exactly is refused with a `WakeModelError`.
///
/// Loading is planning: every activation tensor of the main subgraph gets its own region
/// of one arena (these models are a few KB, so no reuse by lifetime), resource variables
/// get theirs, the constant data the kernels read (weights, biases, per-channel
/// multipliers, the logistic table) is copied into one block, and each operator becomes a
/// `WakeStep` whose parameters are all resolved. `invoke()` then runs the steps with no
/// allocation. The CALL_ONCE init subgraph (which, in the microWakeWord models, assigns
/// each streaming-state variable a constant of its zero point) runs at load and at
/// `reset()`, which is when TFLite's CALL_ONCE runs it: before anything else on the first
/// invoke of a fresh interpreter.
///
/// Which arithmetic each kernel follows (Ops.swift) is that of TensorFlow Lite 2.17's
/// builtin op resolver as pymicro-wakeword 2.5.0's bundled libtensorflowlite_c.so runs it
/// on x86-64 (no delegate is applied to these all-integer models).

/// Why a model was refused. Operator indices are those of the operator's own subgraph;
/// tensor indices likewise.
public enum WakeModelError: Error, Equatable {
    /// Shorter than a FlatBuffer header, or no "TFL3" file identifier.
    case notATFLiteFile
    /// An offset, vector or string reaches outside the file.
    case outOfBounds(offset: Int)
    /// A table's vtable is malformed or a field does not fit its table.
    case badVTable(offset: Int)
    /// Model.version other than 3.
    case unsupportedSchemaVersion(UInt32)
    /// A required table, vector or field is absent.
    case missingField
    /// Over one of this runner's limits (`WakeModel.Limits`).
    case tooLarge
    case badSubgraphIndex(Int)
    case badOpcodeIndex(op: Int)
    case badTensorIndex(op: Int, index: Int)
    case badBufferIndex(tensor: Int)
    /// A builtin operator this runner does not implement (the BuiltinOperator code).
    case unsupportedOperator(op: Int, code: Int32)
    /// A custom operator.
    case customOperator(op: Int)
    case unsupportedTensorType(tensor: Int, type: Int8)
    /// Sparsity, old-style variable tensors, or a zero-sized dimension.
    case unsupportedTensorFeature(tensor: Int)
    /// A negative dimension, too many dimensions, or too many elements.
    case badShape(tensor: Int)
    /// A constant buffer whose size is not the tensor's.
    case badConstantSize(tensor: Int)
    /// Scale, zero point or quantised dimension missing or out of range.
    case badQuantization(tensor: Int)
    case wrongTensorType(op: Int, tensor: Int)
    case wrongOperandCount(op: Int)
    case missingOptions(op: Int)
    /// Options with an invalid value (stride 0, an axis out of range, …).
    case badOptions(op: Int)
    /// Valid options this runner does not implement (an activation, ellipsis mask, …).
    case unsupportedOptions(op: Int)
    /// A tensor's declared shape is not what the operator computes from its inputs.
    case shapeMismatch(op: Int, tensor: Int)
    /// Quantisation parameters the operator cannot take (e.g. CONCATENATION rescaling).
    case quantizationMismatch(op: Int)
    case notConstant(op: Int, tensor: Int)
    /// An operator reads a tensor no earlier operator (or the subgraph input) wrote.
    case tensorNotReady(op: Int, tensor: Int)
    /// An operator writes a constant, an input, or an already written tensor.
    case tensorWrittenTwice(op: Int, tensor: Int)
    /// An unknown, uninitialised or mis-sized resource variable.
    case badVariable(op: Int)
    /// The CALL_ONCE subgraph does more than assign constants to variables.
    case badInitSubgraph(op: Int)
    /// The main subgraph's inputs and outputs are not one int8 input and one 8-bit output
    /// (for WakeDetector: input [1, frames, features], output one element).
    case badModelIO
    case arenaTooLarge(bytes: Int, limit: Int)
}

// MARK: - FlatBuffer reading

/// A table as found in the file: where it starts, where its vtable is.
struct FBTable {
    let pos: Int
    let vtable: Int
    let vtableSize: Int
    let inlineSize: Int
}

/// A vector's first element and element count (already checked to lie in the file).
struct FBVector {
    let start: Int
    let count: Int
}

/// Bounds-checked little-endian reads of the model bytes. Positions are computed in
/// Int64 so that nothing overflows on a 32-bit board.
struct FlatBufferReader {
    let bytes: [UInt8]

    /// `pos` as an index, if `width` bytes from it lie in the file.
    @inline(__always)
    func checked(_ pos: Int64, _ width: Int64) throws(WakeModelError) -> Int {
        guard pos >= 0, width >= 0, pos <= Int64(bytes.count) - width else {
            throw .outOfBounds(offset: Int(truncatingIfNeeded: pos))
        }
        return Int(pos)
    }

    func u8(_ p: Int) throws(WakeModelError) -> UInt8 {
        bytes[try checked(Int64(p), 1)]
    }

    func u16(_ p: Int) throws(WakeModelError) -> UInt16 {
        let i = try checked(Int64(p), 2)
        return UInt16(bytes[i]) | UInt16(bytes[i + 1]) << 8
    }

    func u32(_ p: Int) throws(WakeModelError) -> UInt32 {
        let i = try checked(Int64(p), 4)
        return UInt32(bytes[i]) | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2]) << 16 | UInt32(bytes[i + 3]) << 24
    }

    func u64(_ p: Int) throws(WakeModelError) -> UInt64 {
        let lo = try u32(p)
        let hi = try u32(p + 4)
        return UInt64(lo) | UInt64(hi) << 32
    }

    /// Where the uoffset stored at `p` points (uoffsets are relative to their own position).
    func deref(_ p: Int) throws(WakeModelError) -> Int {
        let off = try u32(p)
        return try checked(Int64(p) + Int64(off), 1)
    }

    /// The table at `pos`: its first word is a signed offset back to its vtable, whose first
    /// two 16-bit words are the vtable's size and the table's inline size.
    func table(at pos: Int) throws(WakeModelError) -> FBTable {
        let soffset = Int32(bitPattern: try u32(pos))
        let vt = try checked(Int64(pos) - Int64(soffset), 4)
        let vtSize = Int(try u16(vt))
        let inline = Int(try u16(vt + 2))
        guard vtSize >= 4, vtSize & 1 == 0, inline >= 4 else { throw .badVTable(offset: vt) }
        _ = try checked(Int64(vt), Int64(vtSize))
        _ = try checked(Int64(pos), Int64(inline))
        return FBTable(pos: pos, vtable: vt, vtableSize: vtSize, inlineSize: inline)
    }

    /// The position of field `slot` (its index in the schema's table declaration; a union
    /// takes two slots, type then value), or nil if absent.
    func field(_ t: FBTable, _ slot: Int, width: Int) throws(WakeModelError) -> Int? {
        let entry = 4 + 2 * slot
        guard entry + 2 <= t.vtableSize else { return nil }
        let off = Int(try u16(t.vtable + entry))
        if off == 0 { return nil }
        guard off >= 4, off + width <= t.inlineSize else { throw .badVTable(offset: t.vtable) }
        return t.pos + off
    }

    func u8Field(_ t: FBTable, _ slot: Int, _ def: UInt8 = 0) throws(WakeModelError) -> UInt8 {
        guard let p = try field(t, slot, width: 1) else { return def }
        return try u8(p)
    }

    func i8Field(_ t: FBTable, _ slot: Int, _ def: Int8 = 0) throws(WakeModelError) -> Int8 {
        Int8(bitPattern: try u8Field(t, slot, UInt8(bitPattern: def)))
    }

    func boolField(_ t: FBTable, _ slot: Int) throws(WakeModelError) -> Bool {
        try u8Field(t, slot) != 0
    }

    func i32Field(_ t: FBTable, _ slot: Int, _ def: Int32 = 0) throws(WakeModelError) -> Int32 {
        guard let p = try field(t, slot, width: 4) else { return def }
        return Int32(bitPattern: try u32(p))
    }

    func u32Field(_ t: FBTable, _ slot: Int, _ def: UInt32 = 0) throws(WakeModelError) -> UInt32 {
        guard let p = try field(t, slot, width: 4) else { return def }
        return try u32(p)
    }

    func u64Field(_ t: FBTable, _ slot: Int) throws(WakeModelError) -> UInt64 {
        guard let p = try field(t, slot, width: 8) else { return 0 }
        return try u64(p)
    }

    func tableField(_ t: FBTable, _ slot: Int) throws(WakeModelError) -> FBTable? {
        guard let p = try field(t, slot, width: 4) else { return nil }
        return try table(at: try deref(p))
    }

    /// A vector field whose elements are `elementSize` bytes (strings: 1).
    func vectorField(_ t: FBTable, _ slot: Int, elementSize: Int) throws(WakeModelError) -> FBVector? {
        guard let p = try field(t, slot, width: 4) else { return nil }
        return try vector(at: try deref(p), elementSize: elementSize)
    }

    func vector(at v: Int, elementSize: Int) throws(WakeModelError) -> FBVector {
        let n = try u32(v)
        _ = try checked(Int64(v) + 4, Int64(n) * Int64(elementSize))
        return FBVector(start: v + 4, count: Int(n))
    }

    /// Element `i` of a vector of tables.
    func table(in v: FBVector, _ i: Int) throws(WakeModelError) -> FBTable {
        try table(at: try deref(v.start + 4 * i))
    }

    func i32(in v: FBVector, _ i: Int) throws(WakeModelError) -> Int32 {
        Int32(bitPattern: try u32(v.start + 4 * i))
    }

    func f32(in v: FBVector, _ i: Int) throws(WakeModelError) -> Float {
        Float(bitPattern: try u32(v.start + 4 * i))
    }

    func i64(in v: FBVector, _ i: Int) throws(WakeModelError) -> Int64 {
        Int64(bitPattern: try u64(v.start + 8 * i))
    }

    func bytes(of v: FBVector) -> [UInt8] {
        Array(bytes[v.start ..< v.start + v.count])
    }
}

// MARK: - Schema constants (schema.fbs)

/// TensorType.
enum TensorType {
    static let int32: Int8 = 2
    static let uint8: Int8 = 3
    static let int8: Int8 = 9
    static let resource: Int8 = 13
}

/// BuiltinOperator codes this runner implements.
enum BuiltinOp {
    static let concatenation: Int32 = 2
    static let conv2D: Int32 = 3
    static let depthwiseConv2D: Int32 = 4
    static let fullyConnected: Int32 = 9
    static let logistic: Int32 = 14
    static let reshape: Int32 = 22
    static let stridedSlice: Int32 = 45
    static let splitV: Int32 = 102
    static let quantize: Int32 = 114
    static let callOnce: Int32 = 129
    static let varHandle: Int32 = 142
    static let readVariable: Int32 = 143
    static let assignVariable: Int32 = 144
    /// OperatorCode.deprecated_builtin_code holds codes below this; larger ones say "look
    /// at builtin_code" (schema.fbs: PLACEHOLDER_FOR_GREATER_OP_CODES).
    static let placeholderForGreaterOpCodes: Int32 = 127
}

/// BuiltinOptions union members.
enum OptionsType {
    static let conv2D: UInt8 = 1
    static let depthwiseConv2D: UInt8 = 2
    static let fullyConnected: UInt8 = 8
    static let concatenation: UInt8 = 10
    static let reshape: UInt8 = 17
    static let stridedSlice: UInt8 = 32
    static let splitV: UInt8 = 79
    static let callOnce: UInt8 = 103
    static let varHandle: UInt8 = 111
}

// MARK: - Parsed model (load time only)

/// One tensor of a subgraph as the file describes it.
struct TensorDesc {
    var type: Int8 = 0
    var shape: [Int] = []
    var elements = 1
    /// Constant data: start in the file and length in bytes (length 0: not constant).
    var dataStart = 0
    var dataLength = 0
    var isConstant: Bool { dataLength > 0 }
    /// Per-tensor quantisation (scale 0: none given).
    var scale: Float = 0
    var zeroPoint: Int32 = 0
    /// All scales (per-channel filters) and whether every zero point is 0.
    var scales: [Float] = []
    var zeroPointsAllZero = true
    var quantizedDimension = 0

    var byteSize: Int {
        type == TensorType.int32 ? elements * 4 : (type == TensorType.resource ? 0 : elements)
    }
}

/// One operator as the file describes it.
struct OperatorDesc {
    var code: Int32
    var inputs: [Int]
    var outputs: [Int]
    var optionsType: UInt8
    var options: FBTable?
}

struct SubgraphDesc {
    var tensors: [TensorDesc]
    var inputs: [Int]
    var outputs: [Int]
    var operators: [OperatorDesc]
}

/// Builds the constant block: each append is 16-byte aligned and returns its offset.
struct ConstantBlock {
    var bytes: [UInt8] = []

    mutating func align() {
        while bytes.count & 15 != 0 { bytes.append(0) }
    }

    mutating func append(_ b: ArraySlice<UInt8>) -> Int {
        align()
        let at = bytes.count
        bytes.append(contentsOf: b)
        return at
    }

    mutating func append(int32s: [Int32]) -> Int {
        align()
        let at = bytes.count
        for v in int32s {
            let u = UInt32(bitPattern: v)
            // Native byte order: the kernels read these as Int32.
            withUnsafeBytes(of: u) { raw in bytes.append(contentsOf: raw) }
        }
        return at
    }
}

// MARK: - The model

public final class WakeModel {
    /// Caps on what a file may ask for. The microWakeWord models need 13–20 KB of arena,
    /// 33–53 KB of constants, ≤ 105 tensors, ≤ 61 operators and ≤ 34,000
    /// multiply-accumulates per invoke.
    public struct Limits {
        public var arenaBytes: Int
        public var constantBytes: Int
        public var tensors: Int
        public var operators: Int
        /// Multiply-accumulates of one invoke (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED):
        /// bounds the time a hostile file can make `invoke()` take.
        public var multiplyAccumulates: Int
        public init(arenaBytes: Int = 256 * 1024, constantBytes: Int = 1024 * 1024,
                    tensors: Int = 2048, operators: Int = 1024, multiplyAccumulates: Int = 10_000_000) {
            self.arenaBytes = arenaBytes
            self.constantBytes = constantBytes
            self.tensors = tensors
            self.operators = operators
            self.multiplyAccumulates = multiplyAccumulates
        }
    }

    /// Activations and variables (zeroed at load and reset).
    let arena: UnsafeMutableRawPointer
    /// Weights, biases, multipliers, tables (read-only after load).
    let constants: UnsafeMutableRawPointer
    /// Init steps first (`initStepCount` of them), then the main subgraph's.
    let steps: UnsafeMutableBufferPointer<WakeStep>
    let initStepCount: Int
    /// Side table of Ints for CONCATENATION, SPLIT_V and STRIDED_SLICE steps.
    let table: UnsafeMutableBufferPointer<Int>
    /// Arena offset of each main-subgraph tensor (-1: not in the arena), for tests.
    let tensorOffsets: [Int]
    let tensorSizes: [Int]

    /// Bytes of the arena: activations plus variables.
    public let arenaBytes: Int
    /// Bytes of constant data copied from the file.
    public let constantBytes: Int
    /// The input tensor's shape, quantisation and storage (int8).
    public let inputShape: [Int]
    public let inputScale: Float
    public let inputZeroPoint: Int32
    public let input: UnsafeMutableBufferPointer<Int8>
    /// The output tensor (one uint8 element in the microWakeWord models), as raw bytes.
    public let output: UnsafeBufferPointer<UInt8>
    public let outputIsUnsigned: Bool
    public let outputScale: Float
    public let outputZeroPoint: Int32
    let outputOffset: Int
    /// Number of steps `invoke()` runs.
    public var operatorCount: Int { steps.count - initStepCount }

    /// The first output byte after `invoke()` (a uint8 output's value, or an int8's bit
    /// pattern).
    public var outputByte: UInt8 {
        arena.load(fromByteOffset: outputOffset, as: UInt8.self)
    }

    /// Parses and plans `bytes` (a whole `.tflite` file); the bytes are not kept.
    public init(bytes: [UInt8], limits: Limits = Limits()) throws(WakeModelError) {
        let fb = FlatBufferReader(bytes: bytes)
        let model = try ModelParser(fb: fb, limits: limits)
        var planner = Planner(model: model, fb: fb, limits: limits)
        try planner.plan()

        arenaBytes = planner.arenaSize
        constantBytes = planner.constants.bytes.count
        arena = UnsafeMutableRawPointer.allocate(byteCount: max(arenaBytes, 16), alignment: 16)
        arena.initializeMemory(as: UInt8.self, repeating: 0, count: max(arenaBytes, 16))
        let block = UnsafeMutableRawPointer.allocate(byteCount: max(constantBytes, 16), alignment: 16)
        block.initializeMemory(as: UInt8.self, repeating: 0, count: max(constantBytes, 16))
        planner.constants.bytes.withUnsafeBytes { raw in
            if raw.count > 0 { block.copyMemory(from: raw.baseAddress!, byteCount: raw.count) }
        }
        constants = block
        let all = planner.initSteps + planner.mainSteps
        steps = UnsafeMutableBufferPointer<WakeStep>.allocate(capacity: all.count)
        _ = steps.initialize(from: all)
        initStepCount = planner.initSteps.count
        table = UnsafeMutableBufferPointer<Int>.allocate(capacity: max(planner.table.count, 1))
        table.initialize(repeating: 0)
        _ = table.initialize(from: planner.table)
        tensorOffsets = planner.tensorOffsets
        tensorSizes = planner.tensorSizes

        let main = model.subgraphs[0]
        let inT = main.tensors[main.inputs[0]]
        let outT = main.tensors[main.outputs[0]]
        inputShape = inT.shape
        inputScale = inT.scale
        inputZeroPoint = inT.zeroPoint
        input = UnsafeMutableBufferPointer(
            start: (arena + planner.tensorOffsets[main.inputs[0]]).assumingMemoryBound(to: Int8.self),
            count: inT.elements)
        output = UnsafeBufferPointer(
            start: (arena + planner.tensorOffsets[main.outputs[0]]).assumingMemoryBound(to: UInt8.self),
            count: outT.elements)
        outputIsUnsigned = outT.type == TensorType.uint8
        outputScale = outT.scale
        outputZeroPoint = outT.zeroPoint
        outputOffset = planner.tensorOffsets[main.outputs[0]]
        runInit()
    }

    deinit {
        arena.deallocate()
        constants.deallocate()
        steps.deinitialize()
        steps.deallocate()
        table.deallocate()
    }

    /// Back to the state of a freshly loaded model: arena zeroed, variables initialised by
    /// the CALL_ONCE subgraph (what pymicro-wakeword's reset() gets by reloading the model).
    public func reset() {
        arena.initializeMemory(as: UInt8.self, repeating: 0, count: max(arenaBytes, 16))
        runInit()
    }

    func runInit() {
        let a = arena
        let k = UnsafeRawPointer(constants)
        let t = UnsafePointer(table.baseAddress!)
        for i in 0 ..< initStepCount { steps[i].run(a, k, t) }
    }

    /// Runs the main subgraph once on `input`; the result is then in `outputByte`.
    /// Allocates nothing.
    public func invoke() {
        let a = arena
        let k = UnsafeRawPointer(constants)
        let t = UnsafePointer(table.baseAddress!)
        for i in initStepCount ..< steps.count { steps[i].run(a, k, t) }
    }

    /// A main-subgraph activation tensor's bytes (tests compare them with TFLite's).
    func tensorBytes(_ index: Int) -> UnsafeRawBufferPointer? {
        guard index >= 0, index < tensorOffsets.count, tensorOffsets[index] >= 0 else { return nil }
        return UnsafeRawBufferPointer(start: arena + tensorOffsets[index], count: tensorSizes[index])
    }
}

// MARK: - Parsing the file into descriptions

struct ModelParser {
    var subgraphs: [SubgraphDesc] = []
    /// Effective builtin code of each OperatorCode (-1: custom).
    var opcodes: [Int32] = []

    init(fb: FlatBufferReader, limits: WakeModel.Limits) throws(WakeModelError) {
        let b = fb.bytes
        // Root uoffset, then the file identifier "TFL3" (schema.fbs file_identifier).
        guard b.count >= 8, b[4] == 0x54, b[5] == 0x46, b[6] == 0x4C, b[7] == 0x33 else {
            throw .notATFLiteFile
        }
        let root = try fb.table(at: try fb.deref(0))
        // Model: 0 version, 1 operator_codes, 2 subgraphs, 3 description, 4 buffers, …
        let version = try fb.u32Field(root, 0)
        guard version == 3 else { throw .unsupportedSchemaVersion(version) }
        guard let codes = try fb.vectorField(root, 1, elementSize: 4),
              let subs = try fb.vectorField(root, 2, elementSize: 4),
              let buffers = try fb.vectorField(root, 4, elementSize: 4) else { throw .missingField }
        guard subs.count >= 1, subs.count <= 16, codes.count <= 256 else {
            throw subs.count == 0 ? .missingField : .tooLarge
        }
        for i in 0 ..< codes.count {
            // OperatorCode: 0 deprecated_builtin_code:byte, 1 custom_code, 2 version,
            // 3 builtin_code:int. The effective code is the larger of the two
            // (schema_utils.cc GetBuiltinCode).
            let oc = try fb.table(in: codes, i)
            let deprecated = Int32(try fb.i8Field(oc, 0))
            let builtin = try fb.i32Field(oc, 3)
            let custom = try fb.field(oc, 1, width: 4) != nil
            let code = max(deprecated, builtin)
            opcodes.append(custom && code == 32 ? -1 : code)   // 32: CUSTOM
        }
        var totalTensors = 0
        for s in 0 ..< subs.count {
            let sg = try fb.table(in: subs, s)
            // SubGraph: 0 tensors, 1 inputs, 2 outputs, 3 operators, 4 name.
            guard let tv = try fb.vectorField(sg, 0, elementSize: 4) else { throw .missingField }
            totalTensors += tv.count
            guard totalTensors <= limits.tensors else { throw .tooLarge }
            var tensors: [TensorDesc] = []
            tensors.reserveCapacity(tv.count)
            for t in 0 ..< tv.count {
                tensors.append(try ModelParser.tensor(fb, try fb.table(in: tv, t), index: t, buffers: buffers))
            }
            let inputs = try ModelParser.indices(fb, sg, 1, op: -1, tensorCount: tv.count)
            let outputs = try ModelParser.indices(fb, sg, 2, op: -1, tensorCount: tv.count)
            var ops: [OperatorDesc] = []
            if let ov = try fb.vectorField(sg, 3, elementSize: 4) {
                guard ov.count <= limits.operators else { throw .tooLarge }
                for o in 0 ..< ov.count {
                    // Operator: 0 opcode_index, 1 inputs, 2 outputs, 3 builtin_options_type,
                    // 4 builtin_options, 5 custom_options, …, 8 intermediates,
                    // 11 builtin_options_2_type, 12 builtin_options_2.
                    let ot = try fb.table(in: ov, o)
                    let idx = try fb.u32Field(ot, 0)
                    guard UInt64(idx) < UInt64(opcodes.count) else { throw .badOpcodeIndex(op: o) }
                    let code = opcodes[Int(idx)]
                    if code < 0 { throw .customOperator(op: o) }
                    if let iv = try fb.vectorField(ot, 8, elementSize: 4), iv.count > 0 {
                        throw .unsupportedOptions(op: o)
                    }
                    if try fb.u8Field(ot, 11) != 0 { throw .unsupportedOptions(op: o) }
                    let optType = try fb.u8Field(ot, 3)
                    let opts = optType == 0 ? nil : try fb.tableField(ot, 4)
                    ops.append(OperatorDesc(
                        code: code,
                        inputs: try ModelParser.indices(fb, ot, 1, op: o, tensorCount: tv.count, optional: true),
                        outputs: try ModelParser.indices(fb, ot, 2, op: o, tensorCount: tv.count),
                        optionsType: optType, options: opts))
                }
            }
            subgraphs.append(SubgraphDesc(tensors: tensors, inputs: inputs, outputs: outputs, operators: ops))
        }
    }

    /// A vector of tensor indices; -1 (an omitted optional input) only where `optional`.
    static func indices(_ fb: FlatBufferReader, _ t: FBTable, _ slot: Int, op: Int, tensorCount: Int,
                        optional: Bool = false) throws(WakeModelError) -> [Int] {
        guard let v = try fb.vectorField(t, slot, elementSize: 4) else { return [] }
        guard v.count <= 64 else { throw .tooLarge }
        var out: [Int] = []
        for i in 0 ..< v.count {
            let x = Int(try fb.i32(in: v, i))
            guard (x >= 0 && x < tensorCount) || (optional && x == -1) else {
                throw .badTensorIndex(op: op, index: x)
            }
            out.append(x)
        }
        return out
    }

    static func tensor(_ fb: FlatBufferReader, _ tt: FBTable, index: Int,
                       buffers: FBVector) throws(WakeModelError) -> TensorDesc {
        // Tensor: 0 shape, 1 type, 2 buffer, 3 name, 4 quantization, 5 is_variable,
        // 6 sparsity, 7 shape_signature, 8 has_rank, 9 variant_tensors.
        var d = TensorDesc()
        d.type = try fb.i8Field(tt, 1)
        switch d.type {
        case TensorType.int8, TensorType.uint8, TensorType.int32, TensorType.resource: break
        default: throw .unsupportedTensorType(tensor: index, type: d.type)
        }
        let isVariable = try fb.boolField(tt, 5)
        let sparsity = try fb.field(tt, 6, width: 4)
        if isVariable || sparsity != nil { throw .unsupportedTensorFeature(tensor: index) }
        if let sv = try fb.vectorField(tt, 0, elementSize: 4) {
            guard sv.count <= 5 else { throw .badShape(tensor: index) }
            for i in 0 ..< sv.count {
                let dim = Int(try fb.i32(in: sv, i))
                guard dim >= 1 else {
                    throw dim == 0 ? .unsupportedTensorFeature(tensor: index) : .badShape(tensor: index)
                }
                guard dim <= 1 << 20, d.elements <= (1 << 22) / dim else { throw .badShape(tensor: index) }
                d.shape.append(dim)
                d.elements *= dim
            }
        }
        // Buffer 0 is the empty sentinel; a buffer with data makes the tensor constant.
        let buffer = try fb.u32Field(tt, 2)
        guard UInt64(buffer) < UInt64(buffers.count) else { throw .badBufferIndex(tensor: index) }
        let bi = Int(buffer)
        if bi != 0 {
            // Buffer: 0 data:[ubyte], 1 offset:ulong, 2 size:ulong (offset > 1: the data
            // lies at that file offset, outside the FlatBuffer).
            let bt = try fb.table(in: buffers, bi)
            if let dv = try fb.vectorField(bt, 0, elementSize: 1), dv.count > 0 {
                d.dataStart = dv.start
                d.dataLength = dv.count
            } else {
                let off = try fb.u64Field(bt, 1)
                let size = try fb.u64Field(bt, 2)
                if off > 1 {
                    guard off < 1 << 40, size < 1 << 40 else { throw .outOfBounds(offset: -1) }
                    d.dataStart = try fb.checked(Int64(off), Int64(size))
                    d.dataLength = Int(size)
                }
            }
        }
        if d.isConstant && d.dataLength != d.byteSize { throw .badConstantSize(tensor: index) }
        if d.type == TensorType.resource && d.isConstant { throw .badConstantSize(tensor: index) }
        // QuantizationParameters: 0 min, 1 max, 2 scale, 3 zero_point, 4 details_type,
        // 5 details, 6 quantized_dimension.
        if let q = try fb.tableField(tt, 4) {
            if try fb.u8Field(q, 4) != 0 { throw .badQuantization(tensor: index) }
            let sv = try fb.vectorField(q, 2, elementSize: 4)
            let zv = try fb.vectorField(q, 3, elementSize: 8)
            let ns = sv?.count ?? 0
            let nz = zv?.count ?? 0
            if ns > 0 {
                guard ns <= 4096, nz == ns || nz == 0 else { throw .badQuantization(tensor: index) }
                for i in 0 ..< ns {
                    let s = try fb.f32(in: sv!, i)
                    guard s.isFinite, s > 0 else { throw .badQuantization(tensor: index) }
                    d.scales.append(s)
                }
                for i in 0 ..< nz {
                    let z = try fb.i64(in: zv!, i)
                    if i == 0 {
                        guard z >= -32768, z <= 32767 else { throw .badQuantization(tensor: index) }
                        d.zeroPoint = Int32(z)
                    }
                    if z != 0 { d.zeroPointsAllZero = false }
                }
                d.scale = d.scales[0]
                let qd = Int(try fb.i32Field(q, 6))
                guard qd >= 0, qd < max(d.shape.count, 1) else { throw .badQuantization(tensor: index) }
                d.quantizedDimension = qd
            }
        }
        // 8-bit activations need their zero point inside their own range.
        if d.type == TensorType.int8 && !d.scales.isEmpty && (d.zeroPoint < -128 || d.zeroPoint > 127) {
            throw .badQuantization(tensor: index)
        }
        if d.type == TensorType.uint8 && !d.scales.isEmpty && (d.zeroPoint < 0 || d.zeroPoint > 255) {
            throw .badQuantization(tensor: index)
        }
        return d
    }
}

// MARK: - Planning

/// TFLite's QuantizeMultiplier (quantization_util.cc): m = q·2^shift with q in [0.5, 1)
/// as a Q31 int32 (frexp, then std::round half away from zero); q rounding up to 1.0
/// becomes 0.5 with shift + 1; shifts below −31 flush to (0, 0).
func quantizeMultiplier(_ m: Double) -> (multiplier: Int32, shift: Int32)? {
    if m == 0 { return (0, 0) }
    guard m.isFinite, m > 0 else { return nil }
    if m < 0x1p-40 { return (0, 0) }
    var shift = Int(m.exponent) + 1          // frexp's exponent
    let q = m.significand / 2                // frexp's fraction, in [0.5, 1)
    var fixed = Int64((q * 2147483648.0).rounded(.toNearestOrAwayFromZero))
    if fixed == 1 << 31 {
        fixed /= 2
        shift += 1
    }
    if shift < -31 { return (0, 0) }
    guard shift <= 30 else { return nil }
    return (Int32(fixed), Int32(shift))
}

/// kernel_util.cc Quantize + CalculateActivationRangeQuantizedImpl: the clamp range of a
/// fused activation, in float as TFLite computes it.
func activationRange(_ act: Int8, scale: Float, zeroPoint: Int32, qmin: Int32, qmax: Int32) -> (Int32, Int32)? {
    func quantize(_ f: Float) -> Int32? {
        let t = (f / scale).rounded(.toNearestOrAwayFromZero)
        guard t >= -2147483648.0, t < 2147483648.0 else { return nil }
        let (v, o) = zeroPoint.addingReportingOverflow(Int32(t))
        return o ? nil : v
    }
    switch act {
    case 0: return (qmin, qmax)                                     // NONE
    case 1:                                                         // RELU
        guard let lo = quantize(0) else { return nil }
        return (max(qmin, lo), qmax)
    case 2:                                                         // RELU_N1_TO_1
        guard let lo = quantize(-1), let hi = quantize(1) else { return nil }
        return (max(qmin, lo), min(qmax, hi))
    case 3:                                                         // RELU6
        guard let lo = quantize(0), let hi = quantize(6) else { return nil }
        return (max(qmin, lo), min(qmax, hi))
    default: return nil                                             // TANH, SIGN_BIT
    }
}

struct Planner {
    let model: ModelParser
    let fb: FlatBufferReader
    let limits: WakeModel.Limits
    var constants = ConstantBlock()
    var table: [Int] = []
    var initSteps: [WakeStep] = []
    var mainSteps: [WakeStep] = []
    var arenaSize = 0
    var tensorOffsets: [Int] = []
    var tensorSizes: [Int] = []
    /// Resource variables: key (container, 0, shared_name), arena offset, bytes.
    var variableKeys: [[UInt8]] = []
    var variableOffsets: [Int] = []
    var variableSizes: [Int] = []   // -1 until the init subgraph assigns it
    /// The depthwise kernels' int32 accumulators, shared (one op runs at a time).
    var scratchBytes = 0
    /// Multiply-accumulates planned so far (Int64: 32-bit boards too).
    var work: Int64 = 0

    mutating func addWork(_ outputs: Int, _ perOutput: Int) throws(WakeModelError) {
        // Both factors are at most a tensor's element count (2^22).
        work += Int64(outputs) * Int64(perOutput)
        guard work <= Int64(limits.multiplyAccumulates) else { throw .tooLarge }
    }

    init(model: ModelParser, fb: FlatBufferReader, limits: WakeModel.Limits) {
        self.model = model
        self.fb = fb
        self.limits = limits
    }

    var main: SubgraphDesc { model.subgraphs[0] }

    mutating func allocate(_ bytes: Int) throws(WakeModelError) -> Int {
        let at = (arenaSize + 15) & ~15
        guard bytes <= limits.arenaBytes, at <= limits.arenaBytes - bytes else {
            throw .arenaTooLarge(bytes: at + bytes, limit: limits.arenaBytes)
        }
        arenaSize = at + bytes
        return at
    }

    mutating func constant(_ t: TensorDesc) throws(WakeModelError) -> Int {
        let at = constants.append(fb.bytes[t.dataStart ..< t.dataStart + t.dataLength])
        guard constants.bytes.count <= limits.constantBytes else { throw .tooLarge }
        return at
    }

    mutating func plan() throws(WakeModelError) {
        let m = main
        // Model I/O: one int8 input, one 8-bit output (pymicro-wakeword feeds int8 and
        // reads one uint8; WakeDetector checks the single element).
        guard m.inputs.count == 1, m.outputs.count == 1 else { throw .badModelIO }
        let inT = m.tensors[m.inputs[0]], outT = m.tensors[m.outputs[0]]
        guard inT.type == TensorType.int8, !inT.isConstant, inT.scales.count == 1,
              outT.type == TensorType.uint8 || outT.type == TensorType.int8,
              !outT.isConstant, outT.scales.count == 1,
              m.inputs[0] != m.outputs[0] else { throw .badModelIO }

        // Every 8-bit non-constant tensor of the main subgraph gets its own region.
        tensorOffsets = [Int](repeating: -1, count: m.tensors.count)
        tensorSizes = [Int](repeating: 0, count: m.tensors.count)
        for (i, t) in m.tensors.enumerated() where !t.isConstant {
            if t.type == TensorType.int8 || t.type == TensorType.uint8 {
                tensorOffsets[i] = try allocate(t.elements)
                tensorSizes[i] = t.elements
            }
        }

        var ready = [Bool](repeating: false, count: m.tensors.count)
        for (i, t) in m.tensors.enumerated() where t.isConstant { ready[i] = true }
        ready[m.inputs[0]] = true
        /// Resource tensor → variable index.
        var handles = [Int](repeating: -1, count: m.tensors.count)
        var initSubgraph = -1

        // First pass over the main subgraph's VAR_HANDLEs and CALL_ONCE so the init
        // subgraph can be planned first (its assignments fix the variables' sizes).
        for (o, op) in m.operators.enumerated() where op.code == BuiltinOp.callOnce {
            guard op.inputs.isEmpty, op.outputs.isEmpty else { throw .wrongOperandCount(op: o) }
            guard op.optionsType == OptionsType.callOnce, let opt = op.options else { throw .missingOptions(op: o) }
            let sg = Int(try fb.i32Field(opt, 0))
            guard sg > 0, sg < model.subgraphs.count else { throw .badSubgraphIndex(sg) }
            guard initSubgraph < 0 else { throw .unsupportedOptions(op: o) }
            initSubgraph = sg
        }
        if initSubgraph > 0 { try planInit(initSubgraph) }

        for (o, op) in m.operators.enumerated() {
            for i in op.inputs where i >= 0 {
                guard ready[i] else { throw .tensorNotReady(op: o, tensor: i) }
            }
            for i in op.outputs {
                guard !ready[i] else { throw .tensorWrittenTwice(op: o, tensor: i) }
            }
            try planOp(o, op, &handles)
            for i in op.outputs { ready[i] = true }
        }
        guard ready[m.outputs[0]] else { throw .tensorNotReady(op: -1, tensor: m.outputs[0]) }
        if scratchBytes > 0 {
            let scratch = try allocate(scratchBytes)
            for i in mainSteps.indices {
                if case .depthwise(var p) = mainSteps[i] {
                    p.scratch = scratch
                    mainSteps[i] = .depthwise(p)
                }
            }
        }
    }

    func variableKey(_ op: OperatorDesc, _ o: Int) throws(WakeModelError) -> [UInt8] {
        // VarHandleOptions: 0 container:string, 1 shared_name:string. TFLite identifies a
        // resource variable by the pair (resource_variable.cc / subgraph resource ids).
        guard op.optionsType == OptionsType.varHandle, let opt = op.options else { throw .missingOptions(op: o) }
        var key: [UInt8] = []
        if let c = try fb.vectorField(opt, 0, elementSize: 1) { key += fb.bytes(of: c) }
        key.append(0)
        guard let n = try fb.vectorField(opt, 1, elementSize: 1), n.count > 0, n.count <= 1024 else {
            throw .badOptions(op: o)
        }
        key += fb.bytes(of: n)
        return key
    }

    /// The init subgraph: VAR_HANDLE, and ASSIGN_VARIABLE of a constant. Anything else is
    /// refused (these are the only things microWakeWord's init subgraph does).
    mutating func planInit(_ s: Int) throws(WakeModelError) {
        let sg = model.subgraphs[s]
        guard sg.inputs.isEmpty, sg.outputs.isEmpty else { throw .badInitSubgraph(op: -1) }
        var handles = [Int](repeating: -1, count: sg.tensors.count)
        for (o, op) in sg.operators.enumerated() {
            switch op.code {
            case BuiltinOp.varHandle:
                guard op.inputs.isEmpty, op.outputs.count == 1,
                      sg.tensors[op.outputs[0]].type == TensorType.resource,
                      handles[op.outputs[0]] < 0 else { throw .badInitSubgraph(op: o) }
                let key = try variableKey(op, o)
                var v = variableKeys.firstIndex(of: key) ?? -1
                if v < 0 {
                    variableKeys.append(key)
                    variableOffsets.append(-1)
                    variableSizes.append(-1)
                    v = variableKeys.count - 1
                }
                handles[op.outputs[0]] = v
            case BuiltinOp.assignVariable:
                guard op.inputs.count == 2, op.outputs.isEmpty, op.inputs[0] >= 0, op.inputs[1] >= 0 else {
                    throw .badInitSubgraph(op: o)
                }
                let v = handles[op.inputs[0]]
                let value = sg.tensors[op.inputs[1]]
                guard v >= 0, value.isConstant, value.type == TensorType.int8 else { throw .badInitSubgraph(op: o) }
                if variableSizes[v] < 0 {
                    variableSizes[v] = value.elements
                    variableOffsets[v] = try allocate(value.elements)
                }
                guard variableSizes[v] == value.elements else { throw .badVariable(op: o) }
                let src = try constant(value)
                initSteps.append(.copyConstant(src: src, dst: variableOffsets[v], count: value.elements))
            default:
                throw .badInitSubgraph(op: o)
            }
        }
    }

    // Helpers for operator planning.

    func tensor(_ i: Int) -> TensorDesc { main.tensors[i] }

    func require(_ ok: Bool, _ e: WakeModelError) throws(WakeModelError) {
        if !ok { throw e }
    }

    /// An int8/uint8 activation with per-tensor quantisation.
    func activation(_ o: Int, _ i: Int, uint8: Bool = false) throws(WakeModelError) -> TensorDesc {
        let t = tensor(i)
        let want = uint8 ? TensorType.uint8 : TensorType.int8
        try require(t.type == want, .wrongTensorType(op: o, tensor: i))
        try require(!t.isConstant, .tensorWrittenTwice(op: o, tensor: i))
        try require(t.scales.count == 1, .badQuantization(tensor: i))
        return t
    }

    /// A constant int32 vector (begin/end/strides, sizes, shapes, axes).
    func int32Constant(_ o: Int, _ i: Int) throws(WakeModelError) -> [Int] {
        let t = tensor(i)
        try require(t.type == TensorType.int32, .wrongTensorType(op: o, tensor: i))
        try require(t.isConstant, .notConstant(op: o, tensor: i))
        try require(t.elements <= 64, .tooLarge)
        var out: [Int] = []
        for k in 0 ..< t.elements {
            let p = t.dataStart + 4 * k
            out.append(Int(Int32(bitPattern: UInt32(fb.bytes[p]) | UInt32(fb.bytes[p + 1]) << 8
                | UInt32(fb.bytes[p + 2]) << 16 | UInt32(fb.bytes[p + 3]) << 24)))
        }
        return out
    }

    /// The int32 bias vector of CONV/DEPTHWISE/FC, copied to the constant block (-1: none).
    mutating func bias(_ o: Int, _ op: OperatorDesc, count: Int) throws(WakeModelError) -> Int {
        guard op.inputs.count > 2, op.inputs[2] >= 0 else { return -1 }
        let b = tensor(op.inputs[2])
        try require(b.type == TensorType.int32, .wrongTensorType(op: o, tensor: op.inputs[2]))
        try require(b.isConstant, .notConstant(op: o, tensor: op.inputs[2]))
        try require(b.elements == count, .shapeMismatch(op: o, tensor: op.inputs[2]))
        return try constant(b)
    }

    /// Per-channel multipliers and shifts for CONV_2D and DEPTHWISE_CONV_2D, as
    /// kernel_util.cc PopulateConvolutionQuantizationParams computes them:
    /// double(input_scale) · double(filter_scale[c]) / double(output_scale).
    mutating func channelMultipliers(_ o: Int, input: TensorDesc, filterIndex: Int, output: TensorDesc,
                                     channels: Int, dimension: Int) throws(WakeModelError) -> (Int, Int) {
        let f = tensor(filterIndex)
        try require(f.zeroPointsAllZero, .badQuantization(tensor: filterIndex))
        try require(f.scales.count == 1 || (f.scales.count == channels && f.quantizedDimension == dimension),
                    .badQuantization(tensor: filterIndex))
        var ms: [Int32] = [], ss: [Int32] = []
        for c in 0 ..< channels {
            let fs = f.scales.count == 1 ? f.scales[0] : f.scales[c]
            let eff = Double(input.scale) * Double(fs) / Double(output.scale)
            guard let pair = quantizeMultiplier(eff) else { throw .badQuantization(tensor: filterIndex) }
            let (m, s) = pair
            ms.append(m)
            ss.append(s)
        }
        return (constants.append(int32s: ms), constants.append(int32s: ss))
    }

    /// Sums of consecutive runs of `run` int8 filter values (a constant tensor), as int32.
    mutating func filterSums(_ f: TensorDesc, run: Int) -> Int {
        var sums: [Int32] = []
        var i = f.dataStart
        while i < f.dataStart + f.dataLength {
            var s: Int32 = 0
            for j in i ..< i + run { s &+= Int32(Int8(bitPattern: fb.bytes[j])) }
            sums.append(s)
            i += run
        }
        return constants.append(int32s: sums)
    }

    /// Per-channel sums over all taps of a depthwise filter [1, kh, kw, channels].
    mutating func channelSums(_ f: TensorDesc, channels: Int) -> Int {
        var sums = [Int32](repeating: 0, count: channels)
        for j in 0 ..< f.dataLength {
            sums[j % channels] &+= Int32(Int8(bitPattern: fb.bytes[f.dataStart + j]))
        }
        return constants.append(int32s: sums)
    }

    func options(_ o: Int, _ op: OperatorDesc, _ type: UInt8) throws(WakeModelError) -> FBTable {
        guard op.optionsType == type, let t = op.options else { throw .missingOptions(op: o) }
        return t
    }

    /// TFLite's padding (padding.h ComputePaddingHeightWidth): output size and the
    /// leading padding for SAME (0) or VALID (1).
    func padding(_ o: Int, padding: UInt8, input: Int, filter: Int, stride: Int,
                 dilation: Int) throws(WakeModelError) -> (out: Int, pad: Int) {
        try require(stride >= 1 && stride <= 1024 && dilation >= 1 && dilation <= 1024, .badOptions(op: o))
        let effective = (filter - 1) * dilation + 1
        let out: Int
        switch padding {
        case 0: out = (input + stride - 1) / stride
        case 1: out = (input - effective + stride) / stride
        default: throw .badOptions(op: o)
        }
        try require(out >= 1, .badOptions(op: o))
        let total = (out - 1) * stride + effective - input
        return (out, max(total, 0) / 2)
    }

    mutating func planOp(_ o: Int, _ op: OperatorDesc, _ handles: inout [Int]) throws(WakeModelError) {
        switch op.code {
        case BuiltinOp.callOnce:
            break   // planned up front; its subgraph runs at load and reset

        case BuiltinOp.varHandle:
            try require(op.inputs.isEmpty && op.outputs.count == 1, .wrongOperandCount(op: o))
            try require(tensor(op.outputs[0]).type == TensorType.resource, .wrongTensorType(op: o, tensor: op.outputs[0]))
            let key = try variableKey(op, o)
            guard let v = variableKeys.firstIndex(of: key), variableSizes[v] > 0 else { throw .badVariable(op: o) }
            handles[op.outputs[0]] = v

        case BuiltinOp.readVariable:
            // read_variable.cc: copies the variable's current value into the output.
            try require(op.inputs.count == 1 && op.outputs.count == 1 && op.inputs[0] >= 0, .wrongOperandCount(op: o))
            let v = handles[op.inputs[0]]
            try require(v >= 0, .badVariable(op: o))
            let out = try activation(o, op.outputs[0])
            try require(out.elements == variableSizes[v], .badVariable(op: o))
            mainSteps.append(.copy(src: variableOffsets[v], dst: tensorOffsets[op.outputs[0]], count: out.elements))

        case BuiltinOp.assignVariable:
            // assign_variable.cc: the variable takes a copy of the value.
            try require(op.inputs.count == 2 && op.outputs.isEmpty && op.inputs[0] >= 0 && op.inputs[1] >= 0,
                        .wrongOperandCount(op: o))
            let v = handles[op.inputs[0]]
            try require(v >= 0, .badVariable(op: o))
            let value = try activation(o, op.inputs[1])
            try require(value.elements == variableSizes[v], .badVariable(op: o))
            mainSteps.append(.copy(src: tensorOffsets[op.inputs[1]], dst: variableOffsets[v], count: value.elements))

        case BuiltinOp.reshape:
            try planReshape(o, op)
        case BuiltinOp.concatenation:
            try planConcatenation(o, op)
        case BuiltinOp.stridedSlice:
            try planStridedSlice(o, op)
        case BuiltinOp.splitV:
            try planSplitV(o, op)
        case BuiltinOp.conv2D:
            try planConv(o, op)
        case BuiltinOp.depthwiseConv2D:
            try planDepthwise(o, op)
        case BuiltinOp.fullyConnected:
            try planFullyConnected(o, op)
        case BuiltinOp.logistic:
            try planLogistic(o, op)
        case BuiltinOp.quantize:
            try planQuantize(o, op)
        default:
            throw .unsupportedOperator(op: o, code: op.code)
        }
    }

    mutating func planReshape(_ o: Int, _ op: OperatorDesc) throws(WakeModelError) {
        // reshape.cc: same bytes, new shape (from the shape tensor, else the options);
        // one −1 is inferred.
        try require((op.inputs.count == 1 || op.inputs.count == 2) && op.outputs.count == 1 && op.inputs[0] >= 0,
                    .wrongOperandCount(op: o))
        let inT = tensor(op.inputs[0]), outT = tensor(op.outputs[0])
        try require(inT.type == TensorType.int8 || inT.type == TensorType.uint8, .wrongTensorType(op: o, tensor: op.inputs[0]))
        try require(outT.type == inT.type && !outT.isConstant, .wrongTensorType(op: o, tensor: op.outputs[0]))
        try require(inT.scale == outT.scale && inT.zeroPoint == outT.zeroPoint, .quantizationMismatch(op: o))
        var shape: [Int]? = nil
        if op.inputs.count == 2 && op.inputs[1] >= 0 {
            shape = try int32Constant(o, op.inputs[1])
        } else if op.optionsType == OptionsType.reshape, let opt = op.options,
                  let v = try fb.vectorField(opt, 0, elementSize: 4) {
            var s: [Int] = []
            for i in 0 ..< min(v.count, 8) { s.append(Int(try fb.i32(in: v, i))) }
            shape = s
        }
        if let shape {
            var known = 1, unknown = -1
            for (i, d) in shape.enumerated() {
                if d == -1 {
                    try require(unknown < 0, .badOptions(op: o))
                    unknown = i
                } else {
                    try require(d >= 1 && d <= 1 << 22 && known <= (1 << 22) / d, .badOptions(op: o))
                    known *= d
                }
            }
            var resolved = shape
            if unknown >= 0 {
                try require(inT.elements % known == 0, .shapeMismatch(op: o, tensor: op.outputs[0]))
                resolved[unknown] = inT.elements / known
            }
            try require(resolved == outT.shape, .shapeMismatch(op: o, tensor: op.outputs[0]))
        }
        try require(outT.elements == inT.elements, .shapeMismatch(op: o, tensor: op.outputs[0]))
        mainSteps.append(.copy(src: tensorOffsets[op.inputs[0]], dst: tensorOffsets[op.outputs[0]], count: inT.elements))
    }

    mutating func planConcatenation(_ o: Int, _ op: OperatorDesc) throws(WakeModelError) {
        // concatenation.cc: int8 requires every input's scale and zero point to equal the
        // output's (no rescaling), and no fused activation.
        try require(op.inputs.count >= 1 && op.inputs.count <= 16 && op.outputs.count == 1, .wrongOperandCount(op: o))
        let opt = try options(o, op, OptionsType.concatenation)
        let outT = try activation(o, op.outputs[0])
        try require(try fb.i8Field(opt, 1) == 0, .unsupportedOptions(op: o))
        let rank = outT.shape.count
        var axis = Int(try fb.i32Field(opt, 0))
        if axis < 0 { axis += rank }
        try require(axis >= 0 && axis < rank, .badOptions(op: o))
        var outer = 1
        for d in 0 ..< axis { outer *= outT.shape[d] }
        var axisSum = 0
        let start = table.count
        table.append(op.inputs.count)
        for i in op.inputs {
            try require(i >= 0, .wrongOperandCount(op: o))
            let t = tensor(i)
            try require(t.type == TensorType.int8, .wrongTensorType(op: o, tensor: i))
            try require(t.scales.count == 1 && t.scale == outT.scale && t.zeroPoint == outT.zeroPoint,
                        .quantizationMismatch(op: o))
            try require(t.shape.count == rank, .shapeMismatch(op: o, tensor: i))
            for d in 0 ..< rank where d != axis {
                try require(t.shape[d] == outT.shape[d], .shapeMismatch(op: o, tensor: i))
            }
            axisSum += t.shape[axis]
            let src = t.isConstant ? -1 - (try constant(t)) : tensorOffsets[i]
            table.append(src)
            table.append(t.elements / outer)
        }
        try require(axisSum == outT.shape[axis], .shapeMismatch(op: o, tensor: op.outputs[0]))
        mainSteps.append(.concatenation(output: tensorOffsets[op.outputs[0]], outer: outer, spans: start))
    }

    mutating func planSplitV(_ o: Int, _ op: OperatorDesc) throws(WakeModelError) {
        // split_v.cc: size_splits (one may be −1), a scalar axis; num_splits outputs.
        try require(op.inputs.count == 3 && op.inputs.allSatisfy({ $0 >= 0 }) && op.outputs.count >= 1
                    && op.outputs.count <= 16, .wrongOperandCount(op: o))
        let opt = try options(o, op, OptionsType.splitV)
        try require(Int(try fb.i32Field(opt, 0)) == op.outputs.count, .badOptions(op: o))
        let inT = try activation(o, op.inputs[0])
        var sizes = try int32Constant(o, op.inputs[1])
        let axisV = try int32Constant(o, op.inputs[2])
        try require(axisV.count == 1 && sizes.count == op.outputs.count, .badOptions(op: o))
        let rank = inT.shape.count
        var axis = axisV[0]
        if axis < 0 { axis += rank }
        try require(axis >= 0 && axis < rank, .badOptions(op: o))
        var sum = 0, unknown = -1
        for (i, s) in sizes.enumerated() {
            if s == -1 {
                try require(unknown < 0, .badOptions(op: o))
                unknown = i
            } else {
                try require(s >= 0 && s <= inT.shape[axis], .badOptions(op: o))
                sum += s
            }
        }
        if unknown >= 0 {
            try require(sum <= inT.shape[axis], .badOptions(op: o))
            sizes[unknown] = inT.shape[axis] - sum
        } else {
            try require(sum == inT.shape[axis], .badOptions(op: o))
        }
        var outer = 1, inner = 1
        for d in 0 ..< axis { outer *= inT.shape[d] }
        for d in axis + 1 ..< rank { inner *= inT.shape[d] }
        let start = table.count
        table.append(op.outputs.count)
        for (k, i) in op.outputs.enumerated() {
            let t = try activation(o, i)
            try require(t.scale == inT.scale && t.zeroPoint == inT.zeroPoint, .quantizationMismatch(op: o))
            var want = inT.shape
            want[axis] = sizes[k]
            try require(t.shape == want, .shapeMismatch(op: o, tensor: i))
            table.append(tensorOffsets[i])
            table.append(sizes[k] * inner)
        }
        mainSteps.append(.splitV(input: tensorOffsets[op.inputs[0]], outer: outer,
                                 rowBytes: inT.shape[axis] * inner, spans: start))
    }

    mutating func planStridedSlice(_ o: Int, _ op: OperatorDesc) throws(WakeModelError) {
        // strided_slice.cc with strided_slice_logic.h's StartForAxis/StopForAxis.
        try require(op.inputs.count == 4 && op.inputs.allSatisfy({ $0 >= 0 }) && op.outputs.count == 1,
                    .wrongOperandCount(op: o))
        let opt = try options(o, op, OptionsType.stridedSlice)
        let beginMask = Int(try fb.i32Field(opt, 0)), endMask = Int(try fb.i32Field(opt, 1))
        let ellipsis = try fb.i32Field(opt, 2), newAxis = try fb.i32Field(opt, 3)
        let shrink = Int(try fb.i32Field(opt, 4))
        let offset = try fb.boolField(opt, 5)
        try require(ellipsis == 0 && newAxis == 0 && !offset, .unsupportedOptions(op: o))
        let inT = try activation(o, op.inputs[0])
        let outT = try activation(o, op.outputs[0])
        try require(inT.scale == outT.scale && inT.zeroPoint == outT.zeroPoint, .quantizationMismatch(op: o))
        let rank = inT.shape.count
        let begin = try int32Constant(o, op.inputs[1])
        let end = try int32Constant(o, op.inputs[2])
        let strides = try int32Constant(o, op.inputs[3])
        try require(begin.count == rank && end.count == rank && strides.count == rank, .badOptions(op: o))
        // Five axes, leading ones of size 1 (TFLite pads to 5D the same way).
        var starts = [Int](repeating: 0, count: 5), counts = [Int](repeating: 1, count: 5)
        var steps = [Int](repeating: 1, count: 5), inStrides = [Int](repeating: 0, count: 5)
        var outShape: [Int] = []
        var running = 1
        for axis in stride(from: rank - 1, through: 0, by: -1) {
            let size = inT.shape[axis]
            let st = strides[axis]
            try require(st != 0 && st >= -(1 << 20) && st <= 1 << 20, .badOptions(op: o))
            var s = begin[axis]
            if beginMask & (1 << axis) != 0 { s = st > 0 ? Int(Int32.min) : Int(Int32.max) }
            if s < 0 { s += size }
            s = st > 0 ? min(max(s, 0), size) : min(max(s, -1), size - 1)
            var e: Int
            let isShrink = shrink & (1 << axis) != 0
            if isShrink {
                e = s + 1
            } else {
                e = end[axis]
                if endMask & (1 << axis) != 0 { e = st > 0 ? Int(Int32.max) : Int(Int32.min) }
                if e < 0 { e += size }
                e = st > 0 ? min(max(e, 0), size) : min(max(e, -1), size - 1)
            }
            let n = st > 0 ? max(0, (e - s + st - 1) / st) : max(0, (s - e - st - 1) / -st)
            if isShrink { try require(n == 1 && s >= 0 && s < size, .badOptions(op: o)) }
            try require(n >= 1, .unsupportedTensorFeature(tensor: op.outputs[0]))
            let k = 5 - rank + axis
            starts[k] = s
            counts[k] = n
            steps[k] = st
            inStrides[k] = running
            running *= size
            if !isShrink { outShape.insert(n, at: 0) }
        }
        try require(outShape == outT.shape, .shapeMismatch(op: o, tensor: op.outputs[0]))
        let start = table.count
        for k in 0 ..< 5 { table += [starts[k], counts[k], steps[k], inStrides[k]] }
        mainSteps.append(.stridedSlice(input: tensorOffsets[op.inputs[0]], output: tensorOffsets[op.outputs[0]],
                                       params: start))
    }

    mutating func planConv(_ o: Int, _ op: OperatorDesc) throws(WakeModelError) {
        // conv.cc Prepare: an int8 convolution must have a bias.
        try require(op.inputs.count == 3 && op.inputs.allSatisfy({ $0 >= 0 }) && op.outputs.count == 1,
                    .wrongOperandCount(op: o))
        // Conv2DOptions: 0 padding, 1 stride_w, 2 stride_h, 3 fused_activation_function,
        // 4 dilation_w_factor = 1, 5 dilation_h_factor = 1.
        let opt = try options(o, op, OptionsType.conv2D)
        let inT = try activation(o, op.inputs[0])
        let outT = try activation(o, op.outputs[0])
        let f = tensor(op.inputs[1])
        try require(f.type == TensorType.int8, .wrongTensorType(op: o, tensor: op.inputs[1]))
        try require(f.isConstant, .notConstant(op: o, tensor: op.inputs[1]))
        try require(inT.shape.count == 4 && f.shape.count == 4 && outT.shape.count == 4, .shapeMismatch(op: o, tensor: op.inputs[0]))
        let (n, h, w, c) = (inT.shape[0], inT.shape[1], inT.shape[2], inT.shape[3])
        let (oc, kh, kw, fc) = (f.shape[0], f.shape[1], f.shape[2], f.shape[3])
        // Grouped convolution (fc < c) is not implemented.
        try require(fc == c, .shapeMismatch(op: o, tensor: op.inputs[1]))
        let pad = try fb.u8Field(opt, 0)
        let (oh, padTop) = try padding(o, padding: pad, input: h, filter: kh, stride: Int(try fb.i32Field(opt, 2)),
                                       dilation: Int(try fb.i32Field(opt, 5, 1)))
        let (ow, padLeft) = try padding(o, padding: pad, input: w, filter: kw, stride: Int(try fb.i32Field(opt, 1)),
                                        dilation: Int(try fb.i32Field(opt, 4, 1)))
        try require(outT.shape == [n, oh, ow, oc], .shapeMismatch(op: o, tensor: op.outputs[0]))
        guard let pair = activationRange(try fb.i8Field(opt, 3), scale: outT.scale, zeroPoint: outT.zeroPoint,
                                             qmin: -128, qmax: 127) else { throw .unsupportedOptions(op: o) }
        let (lo, hi) = pair
        try addWork(outT.elements, kh * kw * c)
        let (mults, shifts) = try channelMultipliers(o, input: inT, filterIndex: op.inputs[1], output: outT,
                                                     channels: oc, dimension: 0)
        let p = ConvParams(
            input: tensorOffsets[op.inputs[0]], batches: n, inH: h, inW: w, inC: c,
            filter: try constant(f), kH: kh, kW: kw, bias: try bias(o, op, count: oc),
            output: tensorOffsets[op.outputs[0]], outH: oh, outW: ow, outC: oc,
            strideH: Int(try fb.i32Field(opt, 2)), strideW: Int(try fb.i32Field(opt, 1)),
            dilationH: Int(try fb.i32Field(opt, 5, 1)), dilationW: Int(try fb.i32Field(opt, 4, 1)),
            padTop: padTop, padLeft: padLeft, depthMultiplier: 1, referenceFrom: oc,
            inputOffset: -inT.zeroPoint, outputOffset: outT.zeroPoint, activationMin: lo, activationMax: hi,
            multipliers: mults, shifts: shifts, filterSums: filterSums(f, run: kw * c), scratch: 0)
        mainSteps.append(.conv(p))
    }

    mutating func planDepthwise(_ o: Int, _ op: OperatorDesc) throws(WakeModelError) {
        try require((op.inputs.count == 2 || op.inputs.count == 3) && op.inputs[0] >= 0 && op.inputs[1] >= 0
                    && op.outputs.count == 1, .wrongOperandCount(op: o))
        // DepthwiseConv2DOptions: 0 padding, 1 stride_w, 2 stride_h, 3 depth_multiplier,
        // 4 fused_activation_function, 5 dilation_w_factor = 1, 6 dilation_h_factor = 1.
        let opt = try options(o, op, OptionsType.depthwiseConv2D)
        let inT = try activation(o, op.inputs[0])
        let outT = try activation(o, op.outputs[0])
        let f = tensor(op.inputs[1])
        try require(f.type == TensorType.int8, .wrongTensorType(op: o, tensor: op.inputs[1]))
        try require(f.isConstant, .notConstant(op: o, tensor: op.inputs[1]))
        try require(inT.shape.count == 4 && f.shape.count == 4 && outT.shape.count == 4, .shapeMismatch(op: o, tensor: op.inputs[0]))
        let (n, h, w, c) = (inT.shape[0], inT.shape[1], inT.shape[2], inT.shape[3])
        let (one, kh, kw, oc) = (f.shape[0], f.shape[1], f.shape[2], f.shape[3])
        try require(one == 1 && oc % c == 0, .shapeMismatch(op: o, tensor: op.inputs[1]))
        let multiplier = oc / c
        let declared = Int(try fb.i32Field(opt, 3))
        try require(declared == 0 || declared == multiplier, .badOptions(op: o))
        let pad = try fb.u8Field(opt, 0)
        let (oh, padTop) = try padding(o, padding: pad, input: h, filter: kh, stride: Int(try fb.i32Field(opt, 2)),
                                       dilation: Int(try fb.i32Field(opt, 6, 1)))
        let (ow, padLeft) = try padding(o, padding: pad, input: w, filter: kw, stride: Int(try fb.i32Field(opt, 1)),
                                        dilation: Int(try fb.i32Field(opt, 5, 1)))
        try require(outT.shape == [n, oh, ow, oc], .shapeMismatch(op: o, tensor: op.outputs[0]))
        guard let pair = activationRange(try fb.i8Field(opt, 4), scale: outT.scale, zeroPoint: outT.zeroPoint,
                                             qmin: -128, qmax: 127) else { throw .unsupportedOptions(op: o) }
        let (lo, hi) = pair
        try addWork(outT.elements, kh * kw)
        let (mults, shifts) = try channelMultipliers(o, input: inT, filterIndex: op.inputs[1], output: outT,
                                                     channels: oc, dimension: 3)
        // optimized_integer_ops::DepthwiseConvGeneral's output stage (optimized_ops
        // Quantize) rescales channels in blocks of 8 with NEON arithmetic (on x86 through
        // NEON_2_SSE) and the leftover channels with the scalar reference
        // MultiplyByQuantizedMultiplier, whose ties round differently.
        let p = ConvParams(
            input: tensorOffsets[op.inputs[0]], batches: n, inH: h, inW: w, inC: c,
            filter: try constant(f), kH: kh, kW: kw, bias: try bias(o, op, count: oc),
            output: tensorOffsets[op.outputs[0]], outH: oh, outW: ow, outC: oc,
            strideH: Int(try fb.i32Field(opt, 2)), strideW: Int(try fb.i32Field(opt, 1)),
            dilationH: Int(try fb.i32Field(opt, 6, 1)), dilationW: Int(try fb.i32Field(opt, 5, 1)),
            padTop: padTop, padLeft: padLeft, depthMultiplier: multiplier, referenceFrom: oc / 8 * 8,
            inputOffset: -inT.zeroPoint, outputOffset: outT.zeroPoint, activationMin: lo, activationMax: hi,
            multipliers: mults, shifts: shifts, filterSums: channelSums(f, channels: oc), scratch: -1)
        scratchBytes = max(scratchBytes, 4 * oc)
        mainSteps.append(.depthwise(p))
    }

    mutating func planFullyConnected(_ o: Int, _ op: OperatorDesc) throws(WakeModelError) {
        try require((op.inputs.count == 2 || op.inputs.count == 3) && op.inputs[0] >= 0 && op.inputs[1] >= 0
                    && op.outputs.count == 1, .wrongOperandCount(op: o))
        // FullyConnectedOptions: 0 fused_activation_function, 1 weights_format,
        // 2 keep_num_dims, 3 asymmetric_quantize_inputs.
        let opt = try options(o, op, OptionsType.fullyConnected)
        try require(try fb.i8Field(opt, 1) == 0, .unsupportedOptions(op: o))
        let inT = try activation(o, op.inputs[0])
        let outT = try activation(o, op.outputs[0])
        let f = tensor(op.inputs[1])
        try require(f.type == TensorType.int8, .wrongTensorType(op: o, tensor: op.inputs[1]))
        try require(f.isConstant, .notConstant(op: o, tensor: op.inputs[1]))
        try require(f.shape.count == 2, .shapeMismatch(op: o, tensor: op.inputs[1]))
        // Per-tensor weights with zero point 0 (per-channel FC is not implemented).
        try require(f.scales.count == 1 && f.zeroPointsAllZero, .badQuantization(tensor: op.inputs[1]))
        let (units, depth) = (f.shape[0], f.shape[1])
        try require(inT.elements % depth == 0, .shapeMismatch(op: o, tensor: op.inputs[0]))
        let batches = inT.elements / depth
        var want = [batches, units]
        if try fb.boolField(opt, 2) {
            want = inT.shape
            want[want.count - 1] = units
            try require(inT.shape.last == depth, .shapeMismatch(op: o, tensor: op.inputs[0]))
        }
        try require(outT.shape == want, .shapeMismatch(op: o, tensor: op.outputs[0]))
        try addWork(outT.elements, depth)
        guard let pair = activationRange(try fb.i8Field(opt, 0), scale: outT.scale, zeroPoint: outT.zeroPoint,
                                             qmin: -128, qmax: 127) else { throw .unsupportedOptions(op: o) }
        let (lo, hi) = pair
        // kernel_util.cc GetQuantizedConvolutionMultipler: the input·filter scale product
        // is taken in float, then divided in double.
        let product = Double(inT.scale * f.scale)
        guard let ms = quantizeMultiplier(product / Double(outT.scale)) else {
            throw .badQuantization(tensor: op.inputs[1])
        }
        let (m, s) = ms
        let p = FullyConnectedParams(
            input: tensorOffsets[op.inputs[0]], batches: batches, depth: depth, units: units,
            filter: try constant(f), filterSums: filterSums(f, run: depth), bias: try bias(o, op, count: units),
            output: tensorOffsets[op.outputs[0]],
            inputOffset: -inT.zeroPoint, outputOffset: outT.zeroPoint, multiplier: m, shift: s,
            activationMin: lo, activationMax: hi)
        mainSteps.append(.fullyConnected(p))
    }

    mutating func planLogistic(_ o: Int, _ op: OperatorDesc) throws(WakeModelError) {
        try require(op.inputs.count == 1 && op.outputs.count == 1 && op.inputs[0] >= 0, .wrongOperandCount(op: o))
        let inT = try activation(o, op.inputs[0])
        let outT = try activation(o, op.outputs[0])
        try require(inT.elements == outT.elements && inT.shape == outT.shape, .shapeMismatch(op: o, tensor: op.outputs[0]))
        // activations.cc SigmoidPrepare: int8 output must be scale 1/256, zero point −128.
        try require(outT.scale == 0.00390625 && outT.zeroPoint == -128, .quantizationMismatch(op: o))
        let lut = logisticTable(inputScale: inT.scale, inputZeroPoint: inT.zeroPoint,
                                outputScale: outT.scale, outputZeroPoint: outT.zeroPoint)
        constants.align()
        let at = constants.bytes.count
        for v in lut { constants.bytes.append(UInt8(bitPattern: v)) }
        mainSteps.append(.lookup(input: tensorOffsets[op.inputs[0]], output: tensorOffsets[op.outputs[0]],
                                 count: inT.elements, table: at))
    }

    mutating func planQuantize(_ o: Int, _ op: OperatorDesc) throws(WakeModelError) {
        // quantize.cc requantise (8-bit to 8-bit). Only equal scales are implemented: the
        // multiplier is then exactly 1 (QuantizeMultiplier(1.0) = 2^30, shift 1) and every
        // TFLite path reduces to q − zp_in + zp_out, clamped.
        try require(op.inputs.count == 1 && op.outputs.count == 1 && op.inputs[0] >= 0, .wrongOperandCount(op: o))
        let inT = try activation(o, op.inputs[0])
        let outT = tensor(op.outputs[0])
        try require((outT.type == TensorType.uint8 || outT.type == TensorType.int8) && !outT.isConstant,
                    .wrongTensorType(op: o, tensor: op.outputs[0]))
        try require(outT.scales.count == 1, .badQuantization(tensor: op.outputs[0]))
        try require(inT.elements == outT.elements, .shapeMismatch(op: o, tensor: op.outputs[0]))
        try require(inT.scale == outT.scale, .unsupportedOptions(op: o))
        let unsigned = outT.type == TensorType.uint8
        mainSteps.append(.requantize(input: tensorOffsets[op.inputs[0]], output: tensorOffsets[op.outputs[0]],
                                     count: inT.elements, delta: outT.zeroPoint - inT.zeroPoint,
                                     min: unsigned ? 0 : -128, max: unsigned ? 255 : 127))
    }
}
