// A prepared vector search through the Arrow Flight SQL JDBC driver: the query vector bound as
// a java.util.List (lake declares the parameter a list of the column's element type).
//
// usage: java -cp <driver jar> VectorSearch.java QUERY_ENDPOINT SQL VECTOR
//
// SQL has one parameter, the vector; VECTOR is comma-separated floats. Prints the first
// column of each row, then "index <true|false>": whether EXPLAIN of the same bound statement
// shows Lance's ANN nodes.
import java.sql.*;
import java.util.ArrayList;
import java.util.List;

public class VectorSearch {
    public static void main(String[] args) throws Exception {
        String url = "jdbc:arrow-flight-sql://" + args[0].replaceFirst("^grpc://", "")
                + "/?useEncryption=false";
        List<Float> vector = new ArrayList<>();
        for (String v : args[2].split(",")) vector.add(Float.parseFloat(v));
        try (Connection c = DriverManager.getConnection(url)) {
            try (PreparedStatement p = c.prepareStatement(args[1])) {
                p.setObject(1, vector);
                try (ResultSet r = p.executeQuery()) {
                    while (r.next()) System.out.println(r.getLong(1));
                }
            }
            StringBuilder plan = new StringBuilder();
            try (PreparedStatement p = c.prepareStatement("EXPLAIN " + args[1])) {
                p.setObject(1, vector);
                try (ResultSet r = p.executeQuery()) {
                    while (r.next()) plan.append(r.getString(2));
                }
            }
            System.out.println("index " + plan.toString().contains("ANNSubIndex"));
        }
    }
}
